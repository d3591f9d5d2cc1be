package io.streamstate.dev;

import com.google.inject.servlet.GuiceFilter;
import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.http.HttpServer2;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.webapp.WebApp;
import org.eclipse.jetty.servlet.FilterHolder;
import org.eclipse.jetty.webapp.WebAppContext;

/**
 * A YARN cluster in one JVM for the local stack: one ResourceManager and one NodeManager
 * (Hadoop's MiniYARNCluster) on 127.0.0.1, sized for a small machine. Writes the
 * yarn-site.xml that spark-submit reads (HADOOP_CONF_DIR) and a JSON file with the addresses,
 * then runs until it is stopped (SIGTERM stops the cluster and its containers).
 *
 * <p>usage: YarnCluster CONF_DIR RM_WEB_PORT [NM_MEMORY_MB] [NM_VCORES]
 */
public final class YarnCluster {

  private YarnCluster() {}

  private static int freePort() throws Exception {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
      return s.getLocalPort();
    }
  }

  /**
   * Guice-servlet keeps one static filter pipeline for every GuiceFilter Jetty creates, so the
   * NodeManager's web app, started after the ResourceManager's in the same JVM, takes over the
   * ResourceManager's port too (its REST API answers 404). Point the ResourceManager's Jetty
   * filter back at its own pipeline. Not needed, and not done, on a real cluster.
   */
  static void routeResourceManagerWebApp(ResourceManager rm) throws Exception {
    Method getWebapp = ResourceManager.class.getDeclaredMethod("getWebapp");
    getWebapp.setAccessible(true);
    WebApp webApp = (WebApp) getWebapp.invoke(rm);
    Field guiceFilter = WebApp.class.getDeclaredField("guiceFilter");
    guiceFilter.setAccessible(true);
    Field pipeline = GuiceFilter.class.getDeclaredField("injectedPipeline");
    pipeline.setAccessible(true);
    Object rmPipeline = pipeline.get(guiceFilter.get(webApp));
    Field context = HttpServer2.class.getDeclaredField("webAppContext");
    context.setAccessible(true);
    FilterHolder holder = ((WebAppContext) context.get(webApp.httpServer())).getServletHandler().getFilter("guice");
    pipeline.set(holder.getFilter(), rmPipeline);
  }

  public static void main(String[] args) throws Exception {
    File confDir = new File(args[0]);
    int webPort = Integer.parseInt(args[1]);
    int memoryMb = args.length > 2 ? Integer.parseInt(args[2]) : 8192;
    int vcores = args.length > 3 ? Integer.parseInt(args[3]) : 4;

    YarnConfiguration conf = new YarnConfiguration();
    conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, memoryMb);
    conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
    conf.setInt(YarnConfiguration.NM_VCORES, vcores);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 256);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    // A NodeManager whose disk is "over 90%" (99% here before) marks it bad, turns UNHEALTHY
    // and launches nothing, so an application waits ACCEPTED for good. The share is of the
    // volume's size, which on a thin-provisioned machine says little: one of 252 GB with 3 GB
    // usable reads 99% used. At 100 only a disk with no space left is bad. (The switch that
    // turns the check off is read from yarn-site.xml on the class path, not from this conf.)
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    // Streams are long-running applications: the default (10% of the cluster for application
    // masters) would run one at a time here, so a clone or a state job would wait, ACCEPTED,
    // behind the production stream.
    conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
    // Fixed ports: otherwise the minicluster rewrites every address to <hostname>:0.
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    conf.set(YarnConfiguration.RM_HOSTNAME, "127.0.0.1");
    conf.set(YarnConfiguration.RM_ADDRESS, "127.0.0.1:" + freePort());
    conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, "127.0.0.1:" + freePort());
    conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, "127.0.0.1:" + freePort());
    conf.set(YarnConfiguration.RM_ADMIN_ADDRESS, "127.0.0.1:" + freePort());
    conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, "127.0.0.1:" + webPort);
    conf.set(YarnConfiguration.RM_WEBAPP_HTTPS_ADDRESS, "127.0.0.1:" + freePort());
    conf.set(YarnConfiguration.RM_BIND_HOST, "127.0.0.1");
    conf.set(YarnConfiguration.NM_BIND_HOST, "127.0.0.1");
    conf.set("yarn.nodemanager.hostname", "127.0.0.1");
    conf.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, "127.0.0.1:0");
    conf.set(YarnConfiguration.NM_COLLECTOR_SERVICE_ADDRESS, "127.0.0.1:0");
    conf.set("yarn.nodemanager.amrmproxy.address", "127.0.0.1:0");
    conf.set(YarnConfiguration.NM_WEBAPP_HTTPS_ADDRESS, "127.0.0.1:0");

    MiniYARNCluster cluster = new MiniYARNCluster("streamstate", 1, 1, 1);
    cluster.init(conf);
    cluster.start();
    routeResourceManagerWebApp(cluster.getResourceManager(0));
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop));

    Configuration written = cluster.getConfig();
    // A client's yarn-site.xml holds YARN's keys only: the cluster's whole configuration would
    // also say fs.defaultFS=file:///, overriding the core-site.xml of a directory that combines
    // this with an HDFS client configuration (yarn-site.xml is read after core-site.xml).
    Configuration site = new Configuration(false);
    for (Map.Entry<String, String> property : written) {
      if (property.getKey().startsWith("yarn.")) {
        site.set(property.getKey(), written.get(property.getKey()));
      }
    }
    confDir.mkdirs();
    try (OutputStream out = new FileOutputStream(new File(confDir, "yarn-site.xml"))) {
      site.writeXml(out);
    }
    String info = "{\"rm_web\": \"http://" + written.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + "\", "
        + "\"rm_address\": \"" + written.get(YarnConfiguration.RM_ADDRESS) + "\", "
        + "\"nm_web\": \"http://127.0.0.1:" + cluster.getNodeManager(0).getNMContext().getHttpPort() + "\", "
        + "\"work_dir\": \"" + cluster.getTestWorkDir().getAbsolutePath() + "\"}";
    Files.write(new File(confDir, "yarn-cluster.json").toPath(), info.getBytes(StandardCharsets.UTF_8));
    System.out.println("streamstate yarn cluster ready: " + info);
    System.out.flush();
    Thread.currentThread().join();
  }
}
