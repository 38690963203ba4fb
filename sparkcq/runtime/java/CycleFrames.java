// Small steps a cycle takes on its frames, each one call from the driver (sparkcq/runtime/
// frames.py, commit_plan.py): from Python each took three to eight calls into the JVM, and
// a quiet demo cycle takes about forty such steps. Compiled by the Janino compiler Spark
// ships (sparkcq/runtime/jvm_classes.py).
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.CollectMetrics;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Repartition;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructField;

public class CycleFrames {
    private SparkSession session;

    /** The prototype: ``create`` makes a session's. */
    public CycleFrames() {}

    public CycleFrames create(SparkSession session) {
        CycleFrames made = new CycleFrames();
        made.session = session;
        return made;
    }

    /** ``df.coalesce(partitions)`` without an analysis: the node over ``df``'s analysed
     * plan is analysed already. */
    public Dataset coalesce(Dataset df, int partitions) {
        Repartition node = new Repartition(partitions, false, df.logicalPlan());
        node.setAnalyzed();
        return Dataset.ofRows(session, node);
    }

    /** Each line ``key=value`` set in the session's conf; a line ``key`` alone unset. */
    public void configure(String lines) {
        String[] each = lines.split("\n");
        for (int i = 0; i < each.length; i++) {
            int at = each[i].indexOf('=');
            if (at < 0) {
                session.conf().unset(each[i]);
            } else {
                session.conf().set(each[i].substring(0, at), each[i].substring(at + 1));
            }
        }
    }

    /** One union by name of ``frames`` (a column some lack NULL on their rows if
     * ``allowMissing``): one n-ary node, analysed once, when every column name has one
     * type in all of them; else a chain of ``unionByName``, which widens the types (an
     * INT and a BIGINT) but analyses the union built so far at every step. */
    public Dataset unionByName(List frames, boolean allowMissing) {
        if (!sameColumnTypes(frames)) {
            Dataset out = (Dataset) frames.get(0);
            for (int i = 1; i < frames.size(); i++) {
                out = out.unionByName((Dataset) frames.get(i), allowMissing);
            }
            return out;
        }
        List plans = new ArrayList();
        for (int i = 0; i < frames.size(); i++) {
            plans.add(((Dataset) frames.get(i)).logicalPlan());
        }
        return Dataset.ofRows(session, new Union(PythonUtils.toSeq(plans), true, allowMissing));
    }

    /** Whether every column name has one type (nullability apart) in all ``frames``. */
    public boolean sameColumnTypes(List frames) {
        HashMap types = new HashMap();
        for (int i = 0; i < frames.size(); i++) {
            StructField[] fields = ((Dataset) frames.get(i)).schema().fields();
            for (int j = 0; j < fields.length; j++) {
                String type = fields[j].dataType().simpleString();
                Object known = types.putIfAbsent(fields[j].name(), type);
                if (known != null && !known.equals(type)) {
                    return false;
                }
            }
        }
        return true;
    }

    /** ``observed`` with aggregates ``rows`` and ``earliest``, or ``rows`` and ``none``
     * when ``df`` has no column ``time`` (a state without instants). */
    public LogicalPlan observedState(Dataset df, String name, long id, Expression keep,
                                     Expression column, Expression rows, Expression earliest,
                                     Expression none, String time) {
        boolean timed = java.util.Arrays.asList(df.columns()).contains(time);
        return observed(df, name, id, keep, column, rows, timed ? earliest : none, null, null);
    }

    /** A commit part over ``df`` whose tasks compute ``a`` to ``d`` (named
     * aggregates; null past the last) under ``name`` as they read it, keep the rows where
     * ``keep`` holds and project them to ``column``: unresolved, for the union's one
     * analysis. */
    public LogicalPlan observed(Dataset df, String name, long id, Expression keep,
                                Expression column, Expression a, Expression b, Expression c,
                                Expression d) {
        List metrics = new ArrayList();
        Expression[] given = {a, b, c, d};
        for (int i = 0; i < given.length; i++) {
            if (given[i] != null) {
                metrics.add(given[i]);
            }
        }
        return observedAll(df, name, id, keep, column, PythonUtils.toSeq(metrics));
    }

    /** ``observed`` with any number of ``metrics`` (a sequence made by the caller). */
    public LogicalPlan observedAll(Dataset df, String name, long id, Expression keep,
                                   Expression column, scala.collection.immutable.Seq metrics) {
        LogicalPlan plan = new CollectMetrics(name, metrics, df.logicalPlan(), id);
        plan = new Filter(keep, plan);
        List columns = new ArrayList();
        columns.add(column);
        return new Project(PythonUtils.toSeq(columns), plan);
    }
}
