"""Fewer round trips from Python into the session's JVM: lookups remembered, lists in one call.

Every call from PySpark into the JVM crosses py4j's local socket, and PySpark makes more of
them than the work needs. ``F.col("k")`` first looks up the class
``org.apache.spark.sql.functions`` and then its method ``col`` (two reflection calls, each
costlier than the call itself: the JVM tries to load the name as a class and falls back to
a package), and a Python list handed to the JVM is built as a Java ``ArrayList`` by one
``add`` call per element, then released by one more. Counted on a cycle of fifty queries:
181 of its 782 calls were lookups and about 150 built lists.

Classes and their methods do not change while a JVM runs, so their lookups are remembered
for the life of the gateway (an unknown name is not remembered: it keeps failing as it
did). A list of at most ten elements, none of them None, is sent as one call to
``java.util.List.of``, an immutable list: the JVM methods PySpark hands lists to read them
(``PythonUtils.toSeq`` copies). Larger lists, and lists holding None (``List.of`` refuses
nulls), are built as before.
"""

from __future__ import annotations

from typing import Any

from py4j.java_collections import ListConverter
from py4j.java_gateway import (
    GatewayClient,
    JavaClass,
    JavaMember,
    JavaPackage,
    JVMView,
)
from py4j.protocol import register_input_converter
from pyspark import SparkContext
from pyspark.sql import SparkSession

_LIST_OF_MOST = 10  # java.util.List.of has fixed-arity forms up to ten elements


class _RememberedClass(JavaClass):
    """A Java class whose static methods and nested classes are looked up once."""

    def __getattr__(self, name: str) -> Any:
        value = _remembered(JavaClass.__getattr__(self, name))
        if isinstance(value, (JavaMember, JavaClass)):  # a static field's value may change
            self.__dict__[name] = value
        return value


class _RememberedPackage(JavaPackage):
    """A Java package whose classes and sub-packages are looked up once."""

    def __getattr__(self, name: str) -> Any:
        value = _remembered(JavaPackage.__getattr__(self, name))
        self.__dict__[name] = value
        return value


class _RememberedView(JVMView):
    """The gateway's view of the JVM, its lookups remembered (see the module)."""

    def __getattr__(self, name: str) -> Any:
        value = _remembered(JVMView.__getattr__(self, name))
        if isinstance(value, (JavaClass, JavaPackage)):
            self.__dict__[name] = value
        return value


def _remembered(value: Any) -> Any:
    """A looked-up class or package, remembering its own lookups in turn."""
    if isinstance(value, JavaClass) and not isinstance(value, _RememberedClass):
        return _RememberedClass(value._fqn, value._gateway_client)
    if isinstance(value, JavaPackage) and not isinstance(value, _RememberedPackage):
        return _RememberedPackage(value._fqn, value._gateway_client, value._jvm_id)
    return value


class _ShortListConverter(ListConverter):
    """Python lists of at most ten elements, none None, as one ``java.util.List.of`` call."""

    def can_convert(self, object: Any) -> bool:  # noqa: A002, D102
        return isinstance(object, (list, tuple))  # sets and dicts: py4j's own converters

    def convert(self, object: Any, gateway_client: GatewayClient) -> Any:  # noqa: A002
        items = list(object)
        if len(items) > _LIST_OF_MOST or any(item is None for item in items):
            return ListConverter.convert(self, items, gateway_client)
        return _list_class(gateway_client).of(*items)


_LIST_CLASSES: dict[int, JavaClass] = {}


def _list_class(gateway_client: GatewayClient) -> JavaClass:
    """``java.util.List`` on ``gateway_client``, its method ``of`` remembered."""
    found = _LIST_CLASSES.get(id(gateway_client))
    if found is None:
        found = _LIST_CLASSES[id(gateway_client)] = _RememberedClass("java.util.List",
                                                                     gateway_client)
    return found


_installed_converter = False


def fewer_round_trips(spark: SparkSession) -> None:
    """Have PySpark's calls into ``spark``'s JVM remember lookups and send short lists in
    one call (see the module). Idempotent; harmless for a session made elsewhere.
    """
    global _installed_converter
    sc = spark.sparkContext
    view = sc._jvm
    if view is not None and not isinstance(view, _RememberedView):
        remembered = _RememberedView.__new__(_RememberedView)
        remembered.__dict__.update(view.__dict__)  # the same view in the JVM: its imports
        SparkContext._jvm = remembered
        view = remembered
    if view is not None and spark._jvm is not view:
        spark._jvm = view
    if not _installed_converter:
        register_input_converter(_ShortListConverter(), prepend=True)
        _installed_converter = True
