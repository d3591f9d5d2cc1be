package io.streamstate.dev;

import java.io.IOException;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/** Hadoop's RawLocalFs (the same four overrides), delegating to {@link ForklessRawLocalFileSystem}. */
public class ForklessRawLocalFs extends DelegateToFileSystem {
    public ForklessRawLocalFs(Configuration conf) throws IOException, URISyntaxException {
        super(FsConstants.LOCAL_FS_URI, new ForklessRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(),
              false);
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
