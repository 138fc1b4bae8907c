// Creates the secured local broker's ACLs in one JVM (launched as a single-file source program):
//   java -cp 'libs/*' KafkaAcls.java admin-java.properties acls.txt
// acls.txt: one "principal resourceType patternType name operation" per line, all ALLOW from any host.
import java.io.FileReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcls {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[0])) {
            props.load(reader);
        }
        List<AclBinding> bindings = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[1]))) {
            if (line.isBlank()) continue;
            String[] f = line.trim().split("\\s+");
            ResourcePattern pattern = new ResourcePattern(
                ResourceType.valueOf(f[1]), f[3], PatternType.valueOf(f[2]));
            AccessControlEntry entry = new AccessControlEntry(
                "User:" + f[0], "*", AclOperation.valueOf(f[4]), AclPermissionType.ALLOW);
            bindings.add(new AclBinding(pattern, entry));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(bindings).all().get();
        }
        System.out.println("created " + bindings.size() + " ACLs");
    }
}
