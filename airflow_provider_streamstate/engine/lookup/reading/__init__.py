"""Where a lookup's state files come from (a checkpoint at a batch, a snapshot's blobs),
one store partition decoded from them, and the bounded cache of decoded partitions."""
