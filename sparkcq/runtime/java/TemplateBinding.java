// An operator's analysed plan re-bound to a cycle's frames and bounds in one call from the
// driver (sparkcq/runtime/templates.py): done from Python, the same steps took about
// eighteen calls into the JVM per text and cycle. Compiled by the Janino compiler Spark
// ships (sparkcq/runtime/jvm_classes.py): no JDK, no jar, no build step.
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.PartialFunction;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

public class TemplateBinding {
    // projections kept per placeholder, one per distinct output of the frames put there
    private static final int OUTPUTS = 4;

    private SparkSession session;
    private LogicalPlan plan;
    private final List bounds = new ArrayList();    // placeholder literals, in order
    private final List leaves = new ArrayList();    // placeholder leaves, in slot order
    private final List schemas = new ArrayList();   // per slot: the columns it stands for
    private final List projections = new ArrayList();  // per slot: output text -> aliases
    private final Seq noNames = PythonUtils.toSeq(new ArrayList());

    /** The prototype: ``create`` makes each template's binding. */
    public TemplateBinding() {}

    public TemplateBinding create(SparkSession session, LogicalPlan plan) {
        TemplateBinding made = new TemplateBinding();
        made.session = session;
        made.plan = plan;
        return made;
    }

    /** The next bound's placeholder value (a whole number the text holds as a literal). */
    public void addBound(long placeholder) {
        bounds.add(Literal$.MODULE$.apply(Long.valueOf(placeholder)));
    }

    /** The next view's placeholder leaf (its output: the view's columns and ids) and the
     * columns of the frame the template was made over. */
    public void addSlot(LogicalPlan leaf, StructType schema) {
        leaves.add(leaf);
        schemas.add(schema);
        projections.add(new HashMap());
    }

    /** The plan over frames ``a`` .. ``d`` (as many as slots, the rest null), its bounds
     * ``values`` (comma-separated, as many as bounds; empty for none), marked analysed;
     * null if a frame does not fit its slot (see ``fits``). */
    public Dataset bind(String values, boolean exact, Dataset a, Dataset b, Dataset c,
                        Dataset d) {
        Dataset[] frames = new Dataset[] {a, b, c, d};
        return bound(values, exact, frames);
    }

    /** ``bind`` for a template of more than four views. */
    public Dataset bindAll(String values, boolean exact, List frames) {
        Dataset[] array = new Dataset[frames.size()];
        for (int i = 0; i < array.length; i++) {
            array[i] = (Dataset) frames.get(i);
        }
        return bound(values, exact, array);
    }

    /** Whether each frame can stand in its slot: with exactly the slot's columns
     * (``exact``), or with the same names and types and no column that may be NULL where
     * the slot's may not (a column never NULL fits a nullable one; the reverse would let
     * the optimiser drop a NULL check the frame needs). Checked here, in the call that
     * binds, rather than by fetching each frame's schema into Python (a call and a JSON
     * text per frame). */
    private boolean fits(Dataset[] frames, boolean exact) {
        for (int i = 0; i < leaves.size(); i++) {
            StructType frame = frames[i].schema();
            StructType slot = (StructType) schemas.get(i);
            if (exact) {
                if (!frame.equals(slot)) {
                    return false;
                }
                continue;
            }
            StructField[] have = frame.fields();
            StructField[] want = slot.fields();
            if (have.length != want.length) {
                return false;
            }
            for (int j = 0; j < have.length; j++) {
                if (!have[j].name().equals(want[j].name())
                        || !have[j].dataType().equals(want[j].dataType())
                        || (have[j].nullable() && !want[j].nullable())) {
                    return false;
                }
            }
        }
        return true;
    }

    private Dataset bound(String values, boolean exact, Dataset[] frames) {
        if (!fits(frames, exact)) {
            return null;
        }
        LogicalPlan p = plan;
        String[] parts = values.isEmpty() ? new String[0] : values.split(",");
        if (parts.length != bounds.size()) {
            throw new IllegalArgumentException(
                "template of " + bounds.size() + " bounds given " + parts.length);
        }
        if (parts.length > 0) {
            HashMap literals = new HashMap();
            for (int i = 0; i < parts.length; i++) {
                literals.put(bounds.get(i),
                             Literal$.MODULE$.apply(Long.valueOf(Long.parseLong(parts[i]))));
            }
            p = (LogicalPlan) p.transformAllExpressions(
                (PartialFunction) CollectionConverters.asScala(literals));
        }
        HashMap swap = new HashMap();
        for (int i = 0; i < leaves.size(); i++) {
            LogicalPlan leaf = (LogicalPlan) leaves.get(i);
            LogicalPlan frame = frames[i].logicalPlan();
            swap.put(leaf, new Project(aliases(i, leaf, frame.output()), frame));
        }
        p = (LogicalPlan) p.transformUp((PartialFunction) CollectionConverters.asScala(swap));
        p.setAnalyzed();
        return Dataset.ofRows(session, p);
    }

    /** A frame's columns under the names and ids of slot ``i``'s placeholder. */
    private Seq aliases(int i, LogicalPlan leaf, Seq output) {
        HashMap known = (HashMap) projections.get(i);
        String key = output.toString();
        Seq found = (Seq) known.get(key);
        if (found != null) {
            return found;
        }
        Seq slot = leaf.output();
        if (slot.size() != output.size()) {
            throw new IllegalArgumentException(
                "frame of " + output.size() + " columns for a view of " + slot.size());
        }
        List list = new ArrayList();
        for (int j = 0; j < output.size(); j++) {
            Attribute placeholder = (Attribute) slot.apply(j);
            list.add(new Alias((Expression) output.apply(j), placeholder.name(),
                               placeholder.exprId(), noNames, scala.None$.MODULE$, noNames));
        }
        found = PythonUtils.toSeq(list);
        if (known.size() >= OUTPUTS) {
            known.clear();
        }
        known.put(key, found);
        return found;
    }
}
