package io.streamstate.dev;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local filesystem ({@code file:}) for the tests' Spark JVMs, with the two calls that
 * start a process done in the JVM instead.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} sets a
 * new file's permission by running {@code chmod}, and FileContext's rename, Spark's default
 * way of writing a checkpoint file, reads each path's link target by running
 * {@code readlink}: about a dozen processes per micro-batch of a small stateful query, two
 * thirds of its CPU (docs/testing.md). Here the permission is set with java.nio, as the native
 * library would with chmod(2), and a path that is not a symbolic link gets its status without
 * a process; a symbolic link, and a sticky bit, go to Hadoop's own code. What is written, its
 * bytes and its permissions, is the same.
 *
 * <p>{@code core-site.xml} in this jar names it (and {@link ForklessLocalFs} for FileContext):
 * a JVM with the jar on its class path, and no core-site.xml before it, uses them.
 */
public class ForklessLocalFileSystem extends LocalFileSystem {
    public ForklessLocalFileSystem() {
        super(new Raw());
    }

    /** The raw (checksum-less) local filesystem under both classes of this jar. */
    public static class Raw extends RawLocalFileSystem {
        // Bit i of a permission's short, from the lowest: others x, w, r; group x, w, r; owner x, w, r.
        private static final PosixFilePermission[] BITS = {
            PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
            PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
            PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ};

        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(p, permission);
                return;
            }
            Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
            short mode = permission.toShort();
            for (int i = 0; i < BITS.length; i++) {
                if ((mode & (1 << i)) != 0) {
                    perms.add(BITS[i]);
                }
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
        }

        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            File file = pathToFile(f);
            if (Files.isSymbolicLink(file.toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }
    }
}
