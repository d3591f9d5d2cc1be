package io.streamstate.dev;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;

/**
 * FileContext's local filesystem ({@code fs.AbstractFileSystem.file.impl}) over
 * {@link ForklessRawLocalFs}: Hadoop's LocalFs, whose raw filesystem is fixed in its
 * package-private constructor, with the same checksum files. Not a LocalFs to
 * {@code instanceof}: Spark's checkpoint file managers of the lines tested ask no such question.
 */
public class ForklessLocalFs extends ChecksumFs {
    /** The signature AbstractFileSystem.newInstance calls; the URI is always file:///, as LocalFs's. */
    public ForklessLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new ForklessRawLocalFs(conf));
    }
}
