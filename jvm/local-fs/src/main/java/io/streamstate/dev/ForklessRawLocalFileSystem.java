package io.streamstate.dev;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw (checksum-less) local filesystem with the two calls of a checkpoint's write
 * path that start a process done in the JVM instead.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} sets a
 * new file's or directory's permission by running {@code chmod}, and reads a path's link
 * status, which FileContext's rename (Spark's default way of writing a checkpoint file) asks
 * for each path it looks at, by running {@code readlink}: about a dozen processes per
 * micro-batch of a small stateful query (docs/testing.md). Here the permission is set with
 * chmod(2) through java.nio, as the native library would, keeping a directory's setuid and
 * setgid bits as {@code chmod} with Hadoop's four-digit mode does; a path that is not a
 * symbolic link gets the status Hadoop would return for it without a process, and a link
 * goes to Hadoop's own code. Other calls (an owner, a permission read back) stay Hadoop's.
 */
public class ForklessRawLocalFileSystem extends RawLocalFileSystem {
    private static final int SET_ID_BITS = 06000;

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
        java.nio.file.Path path = pathToFile(p).toPath();
        int mode = permission.toShort() & 07777;
        try {
            if (Files.isDirectory(path)) {
                mode |= (Integer) Files.getAttribute(path, "unix:mode") & SET_ID_BITS;
            }
            Files.setAttribute(path, "unix:mode", mode);
        } catch (UnsupportedOperationException | IllegalArgumentException notUnix) {
            super.setPermission(p, permission);  // a filesystem without unix attributes: Hadoop's chmod
        }
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
