package peloton.client;

import com.google.protobuf.util.JsonFormat;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.MetadataUtils;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import peloton.api.v0.job.Job.CreateRequest;
import peloton.api.v0.job.Job.CreateResponse;
import peloton.api.v0.job.Job.GetRequest;
import peloton.api.v0.job.Job.GetResponse;
import peloton.api.v0.job.Job.JobConfig;
import peloton.api.v0.job.Job.JobState;
import peloton.api.v0.job.Job.JobType;
import peloton.api.v0.job.JobManagerGrpc;
import peloton.api.v0.respool.ResourceManagerGrpc;
import peloton.api.v0.respool.Respool.LookupRequest;
import peloton.api.v0.respool.Respool.LookupResponse;

/**
 * Creates a batch job through Peloton's v0 API and watches it until it ends.
 *
 * <p>Uses the services a v0 client such as Peloton's own CLI calls:
 * peloton.api.v0.respool.ResourceManager/LookupResourcePoolID,
 * peloton.api.v0.job.JobManager/Create and peloton.api.v0.job.JobManager/Get.
 * Prints to stdout {@code respool ID}, {@code job ID}, then {@code state NAME} at each change.
 */
public final class CreateAndWatch {
  static final int OK = 0, JOB_FAILED = 1, TIMED_OUT = 2, GRPC_ERROR = 3, API_ERROR = 4, USAGE = 64;

  static final String USAGE_TEXT = String.join("\n",
      "usage: java -jar peloton-grpc-client.jar --target HOST:PORT [--ca CA.pem] [--authority NAME]",
      "         [--token TOKEN] --respool PATH (--command CMD [--name NAME] [--instances N] | --config JOB.json)",
      "         [--timeout SECONDS] [--rpc-timeout SECONDS]",
      "  --target       server address, plaintext unless --ca is given (env PELOTON_TARGET)",
      "  --ca           PEM file of the CA that signed the server's certificate; turns TLS on",
      "  --authority    host name to check the server's certificate against (default: the target's)",
      "  --token        sent as `authorization: Bearer TOKEN` on every call (env PELOTON_TOKEN)",
      "  --respool      resource pool path, e.g. /DefaultResPool; the job's respoolID is set from it",
      "  --config       a job.JobConfig in protobuf JSON; --name/--command/--instances then override it",
      "  --timeout      seconds to wait for the job to end (default 300)",
      "  --rpc-timeout  deadline of each call in seconds (default 10)",
      "exit: 0 SUCCEEDED, 1 FAILED/KILLED/DELETED, 2 timeout, 3 gRPC error, 4 error in a response, 64 usage");

  /** An error the server reported in a v0 response's {@code error} field, not as a gRPC status. */
  static final class ApiError extends Exception {
    ApiError(String message) {
      super(message);
    }
  }

  public static void main(String[] argv) {
    System.exit(run(argv));
  }

  static int run(String[] argv) {
    Map<String, String> opts;
    try {
      opts = parse(argv);
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage());
      System.err.println(USAGE_TEXT);
      return USAGE;
    }
    if (opts.containsKey("help")) {
      System.out.println(USAGE_TEXT);
      return OK;
    }
    String target = opts.getOrDefault("target", System.getenv("PELOTON_TARGET"));
    String token = opts.getOrDefault("token", System.getenv("PELOTON_TOKEN"));
    String respool = opts.get("respool");
    if (target == null || target.isEmpty() || respool == null
        || (!opts.containsKey("command") && !opts.containsKey("config"))) {
      System.err.println("--target, --respool and one of --command or --config are required");
      System.err.println(USAGE_TEXT);
      return USAGE;
    }
    double timeoutS, rpcTimeoutS;
    JobConfig.Builder config;
    ManagedChannel channel;
    try {
      timeoutS = Double.parseDouble(opts.getOrDefault("timeout", "300"));
      rpcTimeoutS = Double.parseDouble(opts.getOrDefault("rpc-timeout", "10"));
      config = jobConfig(opts);
      channel = channel(target, opts.get("ca"), opts.get("authority"));
    } catch (IOException | IllegalArgumentException e) {
      System.err.println("error: " + e.getMessage());
      return USAGE;
    }

    Metadata headers = new Metadata();
    if (token != null && !token.isEmpty()) {
      headers.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
    }
    long rpcTimeoutMs = (long) (rpcTimeoutS * 1000);
    try {
      var pools = ResourceManagerGrpc.newBlockingStub(channel)
          .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
      var jobs = JobManagerGrpc.newBlockingStub(channel)
          .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));

      // 1. the pool's id
      LookupRequest.Builder lookup = LookupRequest.newBuilder();
      lookup.getPathBuilder().setValue(respool);
      LookupResponse pool = pools.withDeadlineAfter(rpcTimeoutMs, TimeUnit.MILLISECONDS)
          .lookupResourcePoolID(lookup.build());
      if (pool.hasError()) {
        throw new ApiError("LookupResourcePoolID " + respool + ": " + oneLine(pool.getError()));
      }
      if (pool.getId().getValue().isEmpty()) {
        throw new ApiError("LookupResourcePoolID " + respool + ": the response has no id");
      }
      System.out.println("respool " + pool.getId().getValue());
      config.setRespoolID(pool.getId());

      // 2-3. the job
      CreateResponse created = jobs.withDeadlineAfter(rpcTimeoutMs, TimeUnit.MILLISECONDS)
          .create(CreateRequest.newBuilder().setConfig(config).build());
      if (created.hasError()) {
        throw new ApiError("Create: " + oneLine(created.getError()));
      }
      if (created.getJobId().getValue().isEmpty()) {
        throw new ApiError("Create: the response has no jobId");
      }
      System.out.println("job " + created.getJobId().getValue());
      System.out.flush();

      // 4. its state, every 0.5 s
      GetRequest get = GetRequest.newBuilder().setId(created.getJobId()).build();
      long deadline = System.nanoTime() + (long) (timeoutS * 1e9);
      JobState last = null;
      while (true) {
        GetResponse got = jobs.withDeadlineAfter(rpcTimeoutMs, TimeUnit.MILLISECONDS).get(get);
        if (got.hasError()) {
          throw new ApiError("Get: " + oneLine(got.getError()));
        }
        JobState state = got.getJobInfo().getRuntime().getState();
        if (state != last) {
          System.out.println("state " + state.name());
          System.out.flush();
          last = state;
        }
        switch (state) {
          case SUCCEEDED:
            return OK;
          case FAILED:
          case KILLED:
          case DELETED:
            System.err.println("job ended " + state.name() + ", tasks "
                + got.getJobInfo().getRuntime().getTaskStatsMap());
            return JOB_FAILED;
          default:
            break;
        }
        if (System.nanoTime() > deadline) {
          System.err.println("timeout: job still " + state.name() + " after " + timeoutS + " s");
          return TIMED_OUT;
        }
        Thread.sleep(500);
      }
    } catch (StatusRuntimeException e) {
      // one line: code, description, and the transport's reason if there is one
      String line = "grpc error " + e.getStatus().getCode() + ": " + e.getStatus().getDescription()
          + (e.getCause() != null ? " (" + e.getCause() + ")" : "");
      System.err.println(line.replaceAll("\\s*\n\\s*", " "));
      return GRPC_ERROR;
    } catch (ApiError e) {
      System.err.println("api error " + e.getMessage());
      return API_ERROR;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return TIMED_OUT;
    } finally {
      channel.shutdownNow();
    }
  }

  static Map<String, String> parse(String[] argv) {
    Map<String, String> opts = new HashMap<>();
    for (int i = 0; i < argv.length; i++) {
      String a = argv[i];
      if (a.equals("-h") || a.equals("--help")) {
        opts.put("help", "");
        continue;
      }
      if (!a.startsWith("--")) {
        throw new IllegalArgumentException("unexpected argument: " + a);
      }
      String key = a.substring(2), value;
      int eq = key.indexOf('=');
      if (eq >= 0) {
        value = key.substring(eq + 1);
        key = key.substring(0, eq);
      } else if (i + 1 < argv.length) {
        value = argv[++i];
      } else {
        throw new IllegalArgumentException("missing value for " + a);
      }
      switch (key) {
        case "target": case "ca": case "authority": case "token": case "respool": case "name":
        case "command": case "instances": case "config": case "timeout": case "rpc-timeout":
          opts.put(key, value);
          break;
        default:
          throw new IllegalArgumentException("unknown option: " + a);
      }
    }
    return opts;
  }

  /** The JobConfig from --config (protobuf JSON) or the defaults, then --name/--command/--instances. */
  static JobConfig.Builder jobConfig(Map<String, String> opts) throws IOException {
    JobConfig.Builder config = JobConfig.newBuilder();
    if (opts.containsKey("config")) {
      String json = Files.readString(Path.of(opts.get("config")), StandardCharsets.UTF_8);
      JsonFormat.parser().merge(json, config);
    } else {
      config.setType(JobType.BATCH).setInstanceCount(1);
      config.getDefaultConfigBuilder().getResourceBuilder()
          .setCpuLimit(0.1).setMemLimitMb(32).setDiskLimitMb(32);
    }
    if (opts.containsKey("name")) {
      config.setName(opts.get("name"));
    } else if (config.getName().isEmpty()) {
      config.setName("grpc-client-" + System.currentTimeMillis());
    }
    if (opts.containsKey("instances")) {
      config.setInstanceCount(Integer.parseUnsignedInt(opts.get("instances")));
    }
    if (opts.containsKey("command")) {
      // TaskConfig.command is a mesos.v1.CommandInfo; run through the shell (its default)
      config.getDefaultConfigBuilder().getCommandBuilder().setValue(opts.get("command"));
    }
    return config;
  }

  static ManagedChannel channel(String target, String caFile, String authority) throws IOException {
    ChannelCredentials creds = caFile == null
        ? InsecureChannelCredentials.create()
        : TlsChannelCredentials.newBuilder().trustManager(new File(caFile)).build();
    ManagedChannelBuilder<?> b = Grpc.newChannelBuilder(target, creds);
    if (authority != null) {
      b.overrideAuthority(authority);
    }
    return b.build();
  }

  static String oneLine(com.google.protobuf.MessageOrBuilder m) {
    return m.toString().replaceAll("\\s*\n\\s*", " ").trim();
  }
}
