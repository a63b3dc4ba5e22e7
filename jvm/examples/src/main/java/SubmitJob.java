import java.io.ByteArrayOutputStream;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.UUID;

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
 * Submits one job: the Java producer of README.md ("Publishing jobs from your own producer") as a
 * program. Run from the checkout's root:
 *
 * <pre>java -cp '.jars/examples/*' SubmitJob [BOOTSTRAP [POOL [JOB_FILE [SCHEMA_FILE]]]]</pre>
 *
 * Each argument replaces the README's value; PELOTON_TOPIC_PREFIX, if set, goes in front of the
 * topic's name as it does for the stages. Prints the job id.
 */
public final class SubmitJob {
    private SubmitJob() {}

    public static void main(String[] args) throws Exception {
        // From here on, every line of the README's block runs in its order; the lines between
        // them that the README lacks say so.
        String bootstrap = "127.0.0.1:9092", topic = "peloton.job-commands", pool = "/DefaultResPool";
        String jobFile = "examples/jobs/hello.yaml", schemaFile = "schemas/avro/JobCommand.avsc";
        String jobId = UUID.randomUUID().toString();

        // Not in the README: the arguments and the topic prefix (tests share a broker that way).
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
        value.write(ByteBuffer.allocate(4).putInt(18).array());  // schema id of peloton.JobCommand in ids.yaml
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(value, null);
        new GenericDatumWriter<GenericRecord>(schema).write(command, encoder);
        encoder.flush();

        try (Producer<String, byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, jobId, value.toByteArray())).get();
        }
        System.out.println(jobId);  // then: .venv/bin/pelotonctl job status <this id> --wait
    }
}
