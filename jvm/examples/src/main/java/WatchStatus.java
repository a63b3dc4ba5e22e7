import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Prints the task statuses on peloton.task-status, one line per TaskStatus: job id, instance,
 * run and Mesos state. Run from the checkout's root:
 *
 * <pre>java -cp '.jars/examples/*' WatchStatus [BOOTSTRAP [SCHEMA_DIR]] [--follow]</pre>
 *
 * Reads every partition from its start (committed transactions only) up to where it ended when
 * WatchStatus started, then exits; --follow keeps reading. PELOTON_TOPIC_PREFIX, if set, goes in
 * front of the topic's name as it does for the stages.
 *
 * <p>A message is framed as Confluent's wire format: byte 0, the 4-byte big-endian schema id of
 * schemas/avro/ids.yaml, the Avro body. The topic carries TaskStatus alone, TaskStatuses (a bundle:
 * the job id, then an array of TaskStatus, as a stage's batch sends them), TaskStatusRuns (the host
 * manager's: one status of many runs of a job, each run with its host and time) and TaskProgress
 * (the steps before launch), which is skipped here.
 */
public final class WatchStatus {
    private WatchStatus() {}

    public static void main(String[] args) throws Exception {
        List<String> positional = java.util.Arrays.stream(args).filter(a -> !a.equals("--follow"))
            .collect(Collectors.toList());
        boolean follow = positional.size() < args.length;
        if (positional.size() > 2 || positional.stream().anyMatch(a -> a.startsWith("-"))) {
            System.err.println("usage: WatchStatus [BOOTSTRAP [SCHEMA_DIR]] [--follow]");
            System.exit(2);
        }
        String bootstrap = positional.size() > 0 ? positional.get(0) : "127.0.0.1:9092";
        Path schemaDir = Path.of(positional.size() > 1 ? positional.get(1) : "schemas/avro");
        String topic = System.getenv().getOrDefault("PELOTON_TOPIC_PREFIX", "") + "peloton.task-status";

        // One parser for both files: TaskStatuses refers to peloton.TaskStatus by name.
        Schema.Parser parser = new Schema.Parser();
        Schema status = parser.parse(schemaDir.resolve("TaskStatus.avsc").toFile());
        Schema bundle = parser.parse(schemaDir.resolve("TaskStatuses.avsc").toFile());
        Schema ofRuns = parser.parse(schemaDir.resolve("TaskStatusRuns.avsc").toFile());
        Map<String, Integer> ids = schemaIds(schemaDir.resolve("ids.yaml"));
        Map<Integer, GenericDatumReader<GenericRecord>> readers = new HashMap<>();
        readers.put(ids.get("peloton.TaskStatus"), new GenericDatumReader<>(status));
        readers.put(ids.get("peloton.TaskStatuses"), new GenericDatumReader<>(bundle));
        readers.put(ids.get("peloton.TaskStatusRuns"), new GenericDatumReader<>(ofRuns));

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        props.put("isolation.level", "read_committed");  // what the stages' transactions committed
        // Who this client is to a secure Kafka (SASL SCRAM over TLS); the dev stack's users:
        // eval "$(pelotonctl dev env --kafka-user admin)". No user: a plaintext broker.
        String user = System.getenv("PELOTON_KAFKA_USER"), ca = System.getenv("PELOTON_KAFKA_CA");
        if (user != null && !user.isEmpty()) {
            props.put("security.protocol", "SASL_SSL");
            props.put("sasl.mechanism", "SCRAM-SHA-512");
            props.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + System.getenv("PELOTON_KAFKA_PASSWORD") + "\";");
            if (ca != null && !ca.isEmpty()) {
                props.put("ssl.truststore.type", "PEM");
                props.put("ssl.truststore.location", ca);
            }
        }

        try (KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(props)) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            if (infos == null || infos.isEmpty()) {
                System.err.println("no topic " + topic + " on " + bootstrap);
                System.exit(1);
            }
            // Assigned, not subscribed: a reader outside any group commits nothing and sees it all.
            List<TopicPartition> partitions = infos.stream()
                .map(i -> new TopicPartition(topic, i.partition())).collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            // Under read_committed these are the last stable offsets: nothing past an open transaction.
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            while (true) {
                var records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, byte[]> record : records) {
                    print(record, readers, ids);
                }
                if (!follow && records.isEmpty()
                        && partitions.stream().allMatch(tp -> consumer.position(tp) >= ends.get(tp))) {
                    break;
                }
            }
        }
    }

    private static void print(ConsumerRecord<String, byte[]> record,
                              Map<Integer, GenericDatumReader<GenericRecord>> readers,
                              Map<String, Integer> ids) throws IOException {
        byte[] data = record.value();
        if (data == null || data.length < 5 || data[0] != 0) {
            System.err.println("not Confluent-framed Avro at " + record.topic() + "-" + record.partition()
                + "@" + record.offset());
            return;
        }
        int schemaId = ByteBuffer.wrap(data, 1, 4).getInt();
        GenericDatumReader<GenericRecord> reader = readers.get(schemaId);
        if (reader == null) {
            return;  // TaskProgress, or a schema newer than this program
        }
        GenericRecord value = reader.read(null, DecoderFactory.get().binaryDecoder(data, 5, data.length - 5, null));
        if (schemaId == ids.get("peloton.TaskStatuses")) {
            @SuppressWarnings("unchecked")
            List<GenericRecord> statuses = (List<GenericRecord>) value.get("statuses");
            for (GenericRecord s : statuses) {
                printStatus(s);
            }
        } else if (schemaId == ids.get("peloton.TaskStatusRuns")) {
            @SuppressWarnings("unchecked")
            List<GenericRecord> runs = (List<GenericRecord>) value.get("runs");
            for (GenericRecord run : runs) {
                System.out.println(value.get("job_id") + " " + run.get("instance") + " " + run.get("run_id") + " "
                    + value.get("state"));
            }
        } else {
            printStatus(value);
        }
    }

    private static void printStatus(GenericRecord s) {
        System.out.println(s.get("job_id") + " " + s.get("instance") + " " + s.get("run_id") + " " + s.get("state"));
    }

    /** The `peloton.Name: id` lines of ids.yaml (a flat map: no YAML library needed). */
    private static Map<String, Integer> schemaIds(Path idsYaml) throws IOException {
        Pattern line = Pattern.compile("^([\\w.@]+):\\s*(\\d+)\\s*(#.*)?$");
        Map<String, Integer> ids = new HashMap<>();
        for (String text : Files.readAllLines(idsYaml)) {
            Matcher m = line.matcher(text.strip());
            if (m.matches()) {
                ids.put(m.group(1), Integer.parseInt(m.group(2)));
            }
        }
        for (String needed : List.of("peloton.TaskStatus", "peloton.TaskStatuses")) {
            if (!ids.containsKey(needed)) {
                throw new IOException(idsYaml + " names no " + needed);
            }
        }
        return ids;
    }
}
