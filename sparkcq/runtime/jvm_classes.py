"""Java classes of sparkcq's own, compiled in the session's JVM when first used.

A few steps of a cycle are many small calls into the JVM when made from Python, each a
round trip of 60-90 us on two cores (re-binding a template took about eighteen). Written
in Java, each is one call. The sources ship in ``runtime/java``; Spark ships the Janino
compiler it uses for its own generated code, which compiles them in the JVM in a few tens
of milliseconds: no JDK, no jar on the class path and no build step. Each is compiled once
per session (a class per JVM; sessions of one JVM share it).

Nothing of a client's reaches these classes' text: only sparkcq's own sources are compiled.
"""

from __future__ import annotations

from importlib import resources
from weakref import WeakKeyDictionary

from py4j.java_gateway import JavaObject
from pyspark.sql import SparkSession

_COMPILED: WeakKeyDictionary[SparkSession, dict[str, JavaObject]] = WeakKeyDictionary()


def prototype(spark: SparkSession, name: str) -> JavaObject:
    """An instance of sparkcq's Java class ``name`` (``runtime/java/<name>.java``, made with
    its no-argument constructor) in ``spark``'s JVM, compiled there the first time.
    """
    known = _COMPILED.setdefault(spark, {})
    found = known.get(name)
    if found is None:
        source = resources.files("sparkcq.runtime").joinpath("java", f"{name}.java")
        jvm = spark._jvm
        assert jvm is not None
        compiler = jvm.org.codehaus.janino.SimpleCompiler()
        compiler.cook(source.read_text(encoding="utf-8"))
        found = known[name] = compiler.getClassLoader().loadClass(name).newInstance()
    return found


_SESSION_INSTANCES: WeakKeyDictionary[SparkSession, dict[str, JavaObject]] = (
    WeakKeyDictionary())


def session_instance(spark: SparkSession, name: str) -> JavaObject:
    """``spark``'s one instance of sparkcq's Java class ``name`` whose ``create`` takes the
    session alone (``CycleFrames``), made the first time it is asked for.
    """
    known = _SESSION_INSTANCES.setdefault(spark, {})
    found = known.get(name)
    if found is None:
        found = known[name] = prototype(spark, name).create(spark._jsparkSession)
    return found
