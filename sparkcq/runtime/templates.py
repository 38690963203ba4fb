"""Operators' SQL analysed once and re-bound to each cycle's frames and bounds.

An operator runs the same SQL text every cycle over new frames (a new batch, new state),
with a few whole numbers that change (a watermark, a slice's ``lo`` and ``hi``, written by
``frames.bound_sql``). Spark parses and analyses a text afresh every time it is run, which
costs a small cycle 10-30 ms per text whatever the rows. A template is the analysed plan
of the text with each bound a placeholder literal and each view a placeholder leaf with the
view's columns; a cycle puts its frames and bounds in place (each frame under a projection
that gives its columns the placeholder's attribute ids, as Spark Structured Streaming binds
each micro-batch's data to a plan analysed once) and marks the result analysed:

    SELECT k, sum(v) AS s FROM {inp} WHERE t < <bound 1> GROUP BY k
    analysed once:   Aggregate [k#1] <- Filter (t#3 < 1) <- <inp: k#1, v#2, t#3>
    cycle 7:         the same, with 1 -> 7000 and <inp> -> Project [k#90 AS k#1, ...] <- batch

A template is taken only where re-binding is known to give the plan the analysis would:
every view is a leaf of the plan (none inside a subquery expression), no CTE (whose ids two
copies of one template in one plan would share), no random function (its seed is drawn by
the analyser), each view read once (a self-join needs the analyser to tell its sides
apart), and each frame of the schema the template was made for (names and types; a column
never NULL fits one that may be, not the reverse, which would let the optimiser drop a NULL
check). Otherwise the text is analysed as before.

A session's operators share their templates: an operator of another query (or of another
engine on the session) running the same text over frames of the same columns re-binds the
template the first one made. Not a template holding a user's function, whose name another
engine may give to another function: that one stays its operator's.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from sparkcq.runtime.jvm_classes import prototype

# a bound as ``frames.bound_sql`` writes it
_BOUND = re.compile(
    r"element_at\(array\(CAST\((-?\d+) AS BIGINT\)\), 1 \+ 0 \* spark_partition_id\(\)\)")
# the value standing for bound i in a template's text (outside the range of event times
# and of anything ``bound_sql`` is given): bound i is ``_PLACEHOLDER - i``
_PLACEHOLDER = -(1 << 62) - 7_777_777
# what in an analysed plan's tree string rules a template out (see module); a random
# function draws its seed when analysed, so a template would repeat its numbers every cycle
_NOT_REBINDABLE = re.compile(r"WithCTE|CTERelation|scalar-subquery#|exists#|list#|View \(`"
                             r"|\b(rand|randn|uuid|shuffle|randstr|uniform)\(")
_SCHEMAS = 4  # templates kept per text, for frames of as many schemas
# the frames ``TemplateBinding.bind`` takes as arguments (more go as a list)
_BOUND_ARGUMENTS = 4
# a user's (Python) function in an analysed plan's tree string, ``f(v#3L)#9L`` (see
# ``_Template.own``); a column named ``count(1)#5L`` looks alike, and is kept private too
_USER_FUNCTION = re.compile(r"\)#\d")
# texts whose templates a session's operators share, the least recently used dropped
_SHARED_TEXTS = 4096
_SHARED: WeakKeyDictionary[SparkSession, OrderedDict[tuple[str, tuple[str, ...]],
                                                     list[_Template]]] = WeakKeyDictionary()


def forget_shared(spark: SparkSession) -> None:
    """Drop the templates ``spark``'s operators share (what a count of analyses from a
    clean start needs; nothing else does).
    """
    _SHARED.pop(spark, None)


def _shared(spark: SparkSession) -> OrderedDict[tuple[str, tuple[str, ...]], list[_Template]]:
    """The templates every operator of ``spark`` reads: the same text over frames of the
    same columns (another engine's query of the same shape, a test's next scenario) is
    analysed once per session, not once per operator.
    """
    store = _SHARED.get(spark)
    if store is None:
        store = _SHARED[spark] = OrderedDict()
    return store


@dataclass(frozen=True)
class _Template:
    """An analysed plan with placeholders for its views and bounds, held in the JVM with
    what re-binds it (``runtime/java/TemplateBinding.java``: one call per cycle).
    """

    binding: JavaObject
    slots: tuple[str, ...]  # the key of each view, in the binding's order
    # it holds a user's function, which another engine may define otherwise by that name:
    # kept by its operator alone, not shared by the session's operators
    own: bool = False


class _Jvm:
    """The JVM classes re-binding uses, looked up once per session."""

    def __init__(self, spark: SparkSession):
        jvm = spark._jvm
        assert jvm is not None
        self.jvm = jvm
        catalyst = jvm.org.apache.spark.sql.catalyst
        self.local_relation = getattr(getattr(catalyst.plans.logical, "LocalRelation$"),
                                      "MODULE$")
        self.as_scala = jvm.scala.jdk.javaapi.CollectionConverters.asScala
        self.bindings = prototype(spark, "TemplateBinding")


_JVMS: WeakKeyDictionary[SparkSession, _Jvm] = WeakKeyDictionary()


def _jvm_of(spark: SparkSession) -> _Jvm:
    """The JVM handles of ``spark``, looked up once per session (its operators share
    templates, so whichever binds first may not be the one that made the template).
    """
    jvm = _JVMS.get(spark)
    if jvm is None:
        jvm = _JVMS[spark] = _Jvm(spark)
    return jvm


# runs a text with ``{key}`` naming each frame of ``views``: the frame, and the key of each
# view name the text was run with
Analyse = Callable[[str, Mapping[str, DataFrame]], tuple[DataFrame, dict[str, str]]]


class PlanTemplates:
    """One operator's templates, by text (bounds left out) and the keys of its frames."""

    def __init__(self, spark: SparkSession, texts: int = 16):
        self.spark = spark
        self.texts = texts  # texts whose templates are kept, the least recently used dropped
        # the templates of each text, one per schema of its frames (none: see ``make``)
        self._templates: OrderedDict[tuple[str, tuple[str, ...]], list[_Template]] = (
            OrderedDict())

    def sql(self, text: str, views: Mapping[str, DataFrame], analyse: Analyse) -> DataFrame:
        """``text`` (``{key}`` naming ``views[key]``) over ``views``, re-bound from its
        template; ``analyse`` runs a text (the template's first use, and texts no template
        can stand for).
        """
        values = [int(v) for v in _BOUND.findall(text)]
        numbers = itertools.count()
        shape = _BOUND.sub(lambda _: bound_text(_PLACEHOLDER - next(numbers)), text)
        key = (shape, tuple(views))
        shared = _shared(self.spark)
        store = self._templates if key in self._templates else shared
        known = store.get(key)
        if known is not None:
            store.move_to_end(key)
            if not known:  # no template can stand for the text
                return analyse(text, views)[0]
            for exact in (True, False):  # the closest template first
                for known_template in known:
                    bound = self.bind(known_template, views, values, exact)
                    if bound is not None:
                        return bound
        template, analysed = None, None
        if not any(str(_PLACEHOLDER - i) in text for i in range(len(values))):
            analysed, keys = analyse(shape, views)
            template = self.make(analysed, keys, views, len(values))
        if template is None:  # a placeholder's value in the text itself, or see ``make``
            self._templates[key] = []
            if analysed is not None and not values:  # without bounds the shape is the text
                return analysed
            return analyse(text, views)[0]
        # frames of another schema (or NULLs where the template has none) take a
        # template of their own; one naming a user's function stays this operator's
        store, limit = (self._templates, self.texts) if template.own else (shared, _SHARED_TEXTS)
        store[key] = [template, *(store.get(key) or [])][:_SCHEMAS]
        store.move_to_end(key)
        if len(store) > limit:
            store.popitem(last=False)
        bound = self.bind(template, views, values, exact=True)
        assert bound is not None  # made over these very frames
        return bound

    def make(self, analysed: DataFrame, keys: dict[str, str], views: Mapping[str, DataFrame],
             bounds: int) -> _Template | None:
        """The template of ``analysed`` (bounds as placeholders; ``keys`` the key of each
        view name): a placeholder leaf in place of each view; None when the plan is not one
        a template can stand for (see module).
        """
        jvm = _jvm_of(self.spark)
        plan = analysed._jdf.queryExecution().analyzed()
        found: dict[str, JavaObject] = {}
        if not _find_views(plan, found) or set(found) != set(keys):
            return None
        slots: list[str] = []
        swap = jvm.jvm.java.util.HashMap()
        outputs = {name: view.output() for name, view in found.items()}
        if len({output.toString() for output in outputs.values()}) < len(outputs):
            return None  # two placeholders would be one leaf (the analyser renews such)
        leaves: list[JavaObject] = []
        for name, view in found.items():
            leaf = jvm.local_relation.apply(outputs[name])
            slots.append(keys[name])
            leaves.append((leaf, views[keys[name]]._jdf.schema()))
            swap.put(view, leaf)
        plan = plan.transformUp(jvm.as_scala(swap))
        tree = plan.treeString()
        if _NOT_REBINDABLE.search(tree):
            return None
        binding = jvm.bindings.create(self.spark._jsparkSession, plan)
        for i in range(bounds):
            binding.addBound(_PLACEHOLDER - i)
        for leaf, schema in leaves:
            binding.addSlot(leaf, schema)
        return _Template(binding, tuple(slots), own=_USER_FUNCTION.search(tree) is not None)

    def bind(self, template: _Template, views: Mapping[str, DataFrame],
             values: list[int], exact: bool) -> DataFrame | None:
        """The template with this cycle's bounds and frames in place, analysed as it is;
        None if a frame does not fit its slot: with exactly its columns (``exact``), or
        with the same names and types and no column that may be NULL where the slot's may
        not (a column never NULL fits a nullable one; the reverse would let the optimiser
        drop a NULL check the frame needs). Checked in the JVM, in the call that binds.
        """
        frames = [views[key]._jdf for key in template.slots]
        text = ",".join(map(str, values))
        if len(frames) <= _BOUND_ARGUMENTS:
            padded = frames + [None] * (_BOUND_ARGUMENTS - len(frames))
            bound = template.binding.bind(text, exact, *padded)
        else:
            bound = template.binding.bindAll(text, exact, frames)
        return None if bound is None else ClassicDataFrame(bound, self.spark)


def bound_text(value: int) -> str:
    """SQL for a whole number that changes from cycle to cycle (see ``frames.bound_sql``)."""
    return f"element_at(array(CAST({value} AS BIGINT)), 1 + 0 * spark_partition_id())"


def _find_views(plan: JavaObject, found: dict[str, JavaObject]) -> bool:
    """Collect the view nodes of ``plan`` by name; False if one is read twice."""
    if plan.getClass().getSimpleName() == "View":
        name = plan.desc().identifier().table()
        if name in found:
            return False
        found[name] = plan
        return True
    children = plan.children()
    return all(_find_views(children.apply(i), found) for i in range(children.size()))
