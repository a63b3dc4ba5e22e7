import java.io.ByteArrayOutputStream;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.Properties;
import java.util.UUID;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Submits one job: the Java producer of docs/tutorials/producers.md as a
 * program. Run from the checkout's root:
 *
 * <pre>java -cp '.jars/examples/*' SubmitJob [BOOTSTRAP [POOL [JOB_FILE [SCHEMA_FILE]]]]</pre>
 *
 * Each argument replaces the tutorial's value; PELOTON_TOPIC_PREFIX, if set, goes in front of the
 * topic's name as it does for the stages. Prints the job id.
 */
public final class SubmitJob {
    private SubmitJob() {}

    public static void main(String[] args) throws Exception {
        // From here on, every line of the tutorial's block runs in its order; the lines between
        // them that the tutorial lacks say so.
        String bootstrap = "127.0.0.1:9092", topic = "peloton.job-commands", pool = "/DefaultResPool";
        String jobFile = "examples/jobs/hello.yaml", schemaFile = "schemas/avro/JobCommand.avsc";
        String jobId = UUID.randomUUID().toString();

        // Not in the tutorial: the arguments and the topic prefix (tests share a broker that way).
        if (args.length > 4 || (args.length > 0 && args[0].startsWith("-"))) {
            System.err.println("usage: SubmitJob [BOOTSTRAP [POOL [JOB_FILE [SCHEMA_FILE]]]]");
            System.exit(2);
        }
        if (args.length > 0) bootstrap = args[0];
        if (args.length > 1) pool = args[1];
        if (args.length > 2) jobFile = args[2];
        if (args.length > 3) schemaFile = args[3];
        topic = System.getenv().getOrDefault("PELOTON_TOPIC_PREFIX", "") + topic;

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        props.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        props.put("acks", "all");
        // Who this client is to a secure Kafka (SASL SCRAM over TLS); the dev stack's users:
        // eval "$(pelotonctl dev env --kafka-user producer)". No user: a plaintext broker.
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

        Schema schema = new Schema.Parser().parse(new File(schemaFile));
        GenericRecord command = new GenericRecordBuilder(schema)  // fields not set take their defaults
            .set("command_id", UUID.randomUUID().toString())
            .set("kind", "CREATE")
            .set("job_id", jobId)
            .set("pool", pool)
            .set("config", Files.readString(Path.of(jobFile)))
            .set("requested_by", "my-team")
            .set("timestamp_ms", System.currentTimeMillis())
            .build();

        ByteArrayOutputStream value = new ByteArrayOutputStream();
        value.write(0);                                          // magic byte
        value.write(ByteBuffer.allocate(4).putInt(53).array());  // schema id of peloton.JobCommand in ids.yaml
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(value, null);
        new GenericDatumWriter<GenericRecord>(schema).write(command, encoder);
        encoder.flush();

        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topic, jobId, value.toByteArray());
        // Signed with your token (PELOTON_COMMAND_TOKEN, plt_<id>_<secret>): "<id>:<hex HMAC-SHA256 of the
        // value>", keyed with SHA-256 of the secret; the job manager checks it, then the pool's permissions.
        String token = System.getenv("PELOTON_COMMAND_TOKEN");
        if (token != null && !token.isEmpty()) {
            String[] parts = token.split("_", 3);
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(MessageDigest.getInstance("SHA-256").digest(
                parts[2].getBytes(StandardCharsets.UTF_8)), "HmacSHA256"));
            String signature = parts[1] + ":" + HexFormat.of().formatHex(mac.doFinal(record.value()));
            record.headers().add("peloton-signature", signature.getBytes(StandardCharsets.UTF_8));
        }
        try (Producer<String, byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(record).get();
        }
        System.out.println(jobId);  // then: .venv/bin/pelotonctl job status <this id> --wait
    }
}
