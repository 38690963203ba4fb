// A frame a cycle keeps, made in one call from the driver (sparkcq/runtime/
// columnar_checkpoints.py explains the checkpoint): from Python the same steps took about
// twenty-three calls into the JVM per frame. Compiled by the Janino compiler Spark ships
// (sparkcq/runtime/jvm_classes.py).
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Statistics;
import org.apache.spark.sql.catalyst.plans.physical.Partitioning;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.columnar.DefaultCachedBatchSerializer;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.storage.StorageLevel;
import scala.Option;
import scala.PartialFunction;
import scala.Some;
import scala.collection.immutable.Seq;
import scala.math.BigInt;
import scala.jdk.javaapi.CollectionConverters;

public class CycleCheckpoint {
    private SparkSession session;
    private Option unknown;   // None
    private Option oneByte;   // a small cycle's frames are planned as one byte
    private final DefaultCachedBatchSerializer serializer = new DefaultCachedBatchSerializer();

    /** The prototype: ``create`` makes a session's. */
    public CycleCheckpoint() {}

    public CycleCheckpoint create(SparkSession session, Option unknown, Option oneByte) {
        CycleCheckpoint made = new CycleCheckpoint();
        made.session = session;
        made.unknown = unknown;
        made.oneByte = oneByte;
        return made;
    }

    /** Keep ``df`` as columnar batches computed by the commit: the frame over them (whose
     * batches ``free`` drops); null when Spark plans ``df`` adaptively (a checkpoint of
     * Spark's is taken then). */
    public Dataset keep(Dataset df, boolean small) {
        QueryExecution execution = df.queryExecution();
        SparkPlan plan = execution.executedPlan();
        if (plan.getClass().getSimpleName().equals("AdaptiveSparkPlanExec")) {
            return null;
        }
        Seq output = plan.output();
        SQLConf conf = session.sessionState().conf();
        RDD batches = serializer.convertInternalRowToCachedBatch(
            plan.execute(), output, StorageLevel.MEMORY_AND_DISK(), uncompressed(conf));
        batches.localCheckpoint();
        RDD rows = serializer.convertCachedBatchToInternalRow(batches, output, output, conf);
        Partitioning partitioning = plan.outputPartitioning();
        Seq ordering = plan.outputOrdering();
        HashMap same = sameAsOutput(output, partitioning, ordering);
        if (!same.isEmpty()) {
            PartialFunction renamed = (PartialFunction) CollectionConverters.asScala(same);
            List orders = new ArrayList();
            for (int n = 0; n < ordering.size(); n++) {
                orders.add(((Expression) ordering.apply(n)).transform(renamed));
            }
            ordering = PythonUtils.toSeq(orders);
            if (hashed(partitioning)) {
                partitioning = (Partitioning) ((Expression) partitioning).transform(renamed);
            }
        }
        Option stats = small ? oneByte
            : new Some(capped(execution.optimizedPlan().stats(), conf));
        LogicalRDD relation = new LogicalRDD(output, rows, partitioning, ordering, false,
                                             unknown, session, stats, unknown, true);
        // a leaf of resolved attributes: marked analysed, it skips the analyser's ~2 ms
        relation.setAnalyzed();
        return Dataset.ofRows(session, (LogicalPlan) relation);
    }

    /** ``conf`` with the columnar cache's compression off, for the batches a cycle keeps.
     * Choosing an encoding puts every value of a batch's columns in a hash map of its own
     * (Spark's dictionary encoding), and the state a cycle keeps is written once and read a
     * few times: building its batches compressed took 0.6 us a row of a join's elements,
     * uncompressed 0.06 us, reading them back the same (2026-12-06, 2 cores, 400,000 rows of
     * eight columns); they take about twice the memory. */
    private static SQLConf uncompressed(SQLConf conf) {
        SQLConf copy = conf.clone();
        copy.setConfString("spark.sql.inMemoryColumnarStorage.compressed", "false");
        return copy;
    }

    /** ``stats`` at most Spark's default size (what it assumes of a relation it knows
     * nothing of). Spark estimates a join as the product of its sides, so a state joined
     * with the state before it each cycle doubled its estimate's digits each cycle, and
     * multiplying them took seconds of planning after twenty cycles (2026-12-04: 8 s, then
     * 17 s, then 40 s). Beyond that size no estimate changes a plan: nothing is broadcast. */
    private static Statistics capped(Statistics stats, SQLConf conf) {
        BigInt most = BigInt.apply(conf.defaultSizeInBytes());
        if (stats.sizeInBytes().compare(most) <= 0) {
            return stats;
        }
        return Statistics.apply(most, Statistics.apply$default$2(), stats.attributeStats(),
                                stats.isRuntime());
    }

    /** Drop the batches behind frames ``keep`` made (no wait for them to go); null
     * arguments are skipped. Eight at a time: a cycle frees about that many, in one call. */
    public void free(Dataset a, Dataset b, Dataset c, Dataset d, Dataset e, Dataset f,
                     Dataset g, Dataset h) {
        Dataset[] frames = {a, b, c, d, e, f, g, h};
        for (int n = 0; n < frames.length; n++) {
            if (frames[n] != null) {
                batchesOf(frames[n]).unpersist(false);
            }
        }
    }

    /** Let frames ``keep`` made whose batches the commit computed forget the partitions
     * their rows had before (null arguments are skipped; eight at a time, as ``free``).
     *
     * The rows over a frame's batches take their partitions from the batches when a plan
     * first reads them: in the cycle that makes the frame, before the commit computes the
     * batches and cuts their lineage, so they are the partitions of the plan that made them.
     * A coalesced partition is written into a task with its parents' partitions, found
     * again in the plan's RDDs, and those held the partitions of the frames that plan read,
     * and so on back through every cycle: a window's state merged over four hundred cycles
     * made a task too deep for Java's serialization (a ``StackOverflowError`` that stopped
     * Spark, 2026-12-06). Forgotten, the partitions are taken again from the computed
     * batches: blocks of their own, with nothing behind them. */
    public void settle(Dataset a, Dataset b, Dataset c, Dataset d, Dataset e, Dataset f,
                       Dataset g, Dataset h) throws IllegalAccessException {
        Dataset[] frames = {a, b, c, d, e, f, g, h};
        for (int n = 0; n < frames.length; n++) {
            if (frames[n] != null && batchesOf(frames[n]).isCheckpointed()) {
                PARTITIONS.set(((LogicalRDD) frames[n].logicalPlan()).rdd(), null);
            }
        }
    }

    /** ``RDD.partitions_``, the partitions an RDD found once and keeps (private to Spark:
     * reached by reflection, on the driver, by sparkcq's own code only). */
    private static final java.lang.reflect.Field PARTITIONS = partitionsField();

    private static java.lang.reflect.Field partitionsField() {
        try {
            java.lang.reflect.Field field = RDD.class.getDeclaredField("partitions_");
            field.setAccessible(true);
            return field;
        } catch (NoSuchFieldException e) {
            throw new IllegalStateException("this Spark's RDD has no field partitions_", e);
        }
    }

    /** The id of the RDD of batches behind a frame ``keep`` made (what holds its blocks). */
    public int batchesId(Dataset kept) {
        return batchesOf(kept).id();
    }

    private static RDD batchesOf(Dataset kept) {
        // the frame is a LogicalRDD over its rows, read from the batches
        RDD rows = ((LogicalRDD) kept.logicalPlan()).rdd();
        return ((org.apache.spark.Dependency) rows.dependencies().head()).rdd();
    }

    private static boolean hashed(Partitioning partitioning) {
        // by columns (not one or no partition)
        return partitioning.toString().contains("#");
    }

    /** The columns the plan's order (and hash partitioning) name otherwise than its output
     * does (another qualifier, or none), each mapped to the output's own.
     *
     * A plan's order may name its columns with a subquery's qualifier (``SORT BY k`` over
     * ``(...) AS c`` orders by ``c.k``). The frame's relation keeps both as given, and when
     * a plan reads it twice, Spark renames the second reading's columns by a map of its
     * output: the order, naming no column of that map, stays on the old names, and every
     * join over the second reading sorted it again (the four probes of the demo's window
     * join sorted both of its sides, every cycle). The same holds for a partitioning
     * qualified ``_rows`` over an output qualified ``_p``: a union of runs, one of them read
     * twice, lost its partitioning and shuffled every run (2026-12-05: 575,000 rows a
     * cycle). Each such column is put in as the output has it. */
    private HashMap sameAsOutput(Seq output, Partitioning partitioning, Seq ordering) {
        HashMap same = new HashMap();
        boolean hashed = hashed(partitioning);
        if (ordering.isEmpty() && !hashed) {
            return same;
        }
        for (int n = 0; n < ordering.size(); n++) {
            namedAsOutput((Expression) ordering.apply(n), output, same);
        }
        if (hashed) {
            namedAsOutput((Expression) partitioning, output, same);
        }
        return same;
    }

    private void namedAsOutput(Expression expression, Seq output, HashMap same) {
        Seq columns = expression.references().toSeq();
        for (int n = 0; n < columns.size(); n++) {
            Attribute column = (Attribute) columns.apply(n);
            for (int m = 0; m < output.size(); m++) {
                Attribute own = (Attribute) output.apply(m);
                if (own.exprId().equals(column.exprId()) && !own.equals(column)) {
                    same.put(column, own);
                }
            }
        }
    }
}
