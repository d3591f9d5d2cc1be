package io.streamstate.dev;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's local filesystem ({@code fs.file.impl}) over {@link ForklessRawLocalFileSystem}:
 * the same checksum files. {@code core-site.xml} in this jar names it, and
 * {@link ForklessLocalFs} for FileContext: a JVM with the jar on its class path, and no
 * core-site.xml before it, uses them (the tests' Spark JVMs: dev/local_fs.py).
 */
public class ForklessLocalFileSystem extends LocalFileSystem {
    public ForklessLocalFileSystem() {
        super(new ForklessRawLocalFileSystem());
    }
}
