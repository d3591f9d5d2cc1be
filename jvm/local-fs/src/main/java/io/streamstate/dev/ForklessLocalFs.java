package io.streamstate.dev;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * FileContext's local filesystem ({@code fs.AbstractFileSystem.file.impl}) over
 * {@link ForklessLocalFileSystem.Raw}: Hadoop's LocalFs, whose raw filesystem is fixed in its
 * package-private constructor, with the same checksums and server defaults.
 */
public class ForklessLocalFs extends ChecksumFs {
    public ForklessLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(conf));
    }

    /** Hadoop's RawLocalFs, delegating to the forkless raw filesystem. */
    public static class Raw extends DelegateToFileSystem {
        public Raw(Configuration conf) throws IOException, URISyntaxException {
            super(FsConstants.LOCAL_FS_URI, new ForklessLocalFileSystem.Raw(), conf,
                  FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }
}
