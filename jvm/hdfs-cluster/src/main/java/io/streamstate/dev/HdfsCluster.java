package io.streamstate.dev;

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.SafeModeAction;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import sun.misc.Signal;

/**
 * A real HDFS in one JVM for the local stack: one NameNode and one DataNode (Hadoop's
 * MiniDFSCluster) on 127.0.0.1 on the ports it is given, WebHDFS on, permissions off (any user
 * may do anything: no Kerberos, no superuser needed), its storage under BASE_DIR. The NameNode is
 * formatted only the first time: started again on the same BASE_DIR it keeps the namespace and
 * the blocks. Writes the client side of its configuration (core-site.xml, hdfs-site.xml) and a
 * JSON file with its addresses into CONF_DIR once the DataNode is live and safe mode is off,
 * then runs until it is stopped (SIGTERM stops the DataNode and the NameNode and exits; the
 * storage stays).
 *
 * <p>usage: HdfsCluster CONF_DIR BASE_DIR NN_RPC_PORT NN_HTTP_PORT DN_PORT DN_HTTP_PORT DN_IPC_PORT
 */
public final class HdfsCluster {

  /** Written once the NameNode was formatted and started on BASE_DIR: later starts keep the data. */
  static final String FORMATTED = ".streamstate-formatted";

  private HdfsCluster() {}

  public static void main(String[] args) throws Exception {
    File confDir = new File(args[0]);
    File baseDir = new File(args[1]).getAbsoluteFile();
    int rpcPort = Integer.parseInt(args[2]);
    int httpPort = Integer.parseInt(args[3]);
    int dnPort = Integer.parseInt(args[4]);
    int dnHttpPort = Integer.parseInt(args[5]);
    int dnIpcPort = Integer.parseInt(args[6]);
    boolean format = !new File(baseDir, FORMATTED).exists();
    baseDir.mkdirs();

    Configuration conf = new Configuration();
    conf.set("hadoop.tmp.dir", new File(baseDir, "tmp").getAbsolutePath());
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setInt("dfs.replication", 1);
    conf.set("dfs.datanode.address", "127.0.0.1:" + dnPort);
    conf.set("dfs.datanode.http.address", "127.0.0.1:" + dnHttpPort);
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:" + dnIpcPort);
    conf.set("dfs.namenode.https-address", "127.0.0.1:0");
    conf.set("dfs.datanode.https.address", "127.0.0.1:0");
    // A small machine: few handler threads.
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.namenode.service.handler.count", 2);
    conf.setInt("dfs.datanode.handler.count", 3);
    // One DataNode: a pipeline never has another to add (appends through WebHDFS).
    conf.setBoolean("dfs.client.block.write.replace-datanode-on-failure.enable", false);

    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, baseDir)
        .nameNodePort(rpcPort)
        .nameNodeHttpPort(httpPort)
        .numDataNodes(1)
        .storagesPerDatanode(1)
        .enableManagedDfsDirsRedundancy(false)
        .checkDataNodeAddrConfig(true)
        .format(format)
        .waitSafeMode(true)
        .build();
    cluster.waitActive();
    DistributedFileSystem fs = cluster.getFileSystem();
    while (fs.setSafeMode(SafeModeAction.GET)) {
      Thread.sleep(100);
    }
    // SIGTERM stops the DataNode, then the NameNode (its edit log closed), before the JVM's shutdown
    // starts: stopped from a shutdown hook, the DataNode's own hook removal throws. Not
    // cluster.shutdown(): it deletes BASE_DIR (at once, or when the JVM exits).
    Signal.handle(new Signal("TERM"), signal -> {
      try {
        for (DataNode dn : cluster.getDataNodes()) {
          dn.shutdown();
        }
        NameNode nn = cluster.getNameNode();
        nn.stop();
        nn.join();
      } finally {
        System.exit(0);
      }
    });
    new File(baseDir, FORMATTED).createNewFile();

    String uri = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
    String webhdfs = "http://127.0.0.1:" + cluster.getNameNode().getHttpAddress().getPort();
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", uri);
    Configuration hdfs = new Configuration(false);
    hdfs.set("dfs.namenode.rpc-address", "127.0.0.1:" + cluster.getNameNodePort());
    hdfs.set("dfs.namenode.http-address", webhdfs.substring("http://".length()));
    hdfs.set("dfs.webhdfs.enabled", "true");
    hdfs.set("dfs.permissions.enabled", "false");
    hdfs.set("dfs.replication", "1");
    hdfs.set("dfs.client.block.write.replace-datanode-on-failure.enable", "false");
    confDir.mkdirs();
    try (OutputStream out = new FileOutputStream(new File(confDir, "core-site.xml"))) {
      core.writeXml(out);
    }
    try (OutputStream out = new FileOutputStream(new File(confDir, "hdfs-site.xml"))) {
      hdfs.writeXml(out);
    }
    DataNode dn = cluster.getDataNodes().get(0);
    String info = "{\"uri\": \"" + uri + "\", \"webhdfs_url\": \"" + webhdfs + "\", "
        + "\"datanode\": {\"address\": \"127.0.0.1:" + dn.getXferPort() + "\", "
        + "\"http\": \"http://127.0.0.1:" + dn.getInfoPort() + "\", "
        + "\"ipc\": \"127.0.0.1:" + dn.getIpcPort() + "\"}, "
        + "\"base_dir\": \"" + baseDir + "\", \"formatted\": " + format + "}";
    Files.write(new File(confDir, "hdfs-cluster.json").toPath(), info.getBytes(StandardCharsets.UTF_8));
    System.out.println("streamstate hdfs cluster ready: " + info);
    System.out.flush();
    Thread.currentThread().join();
  }
}
