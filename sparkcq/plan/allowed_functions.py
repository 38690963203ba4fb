"""Spark's built-in functions a server client's query may call, and why the others may not.

An allow-list, not a deny-list: a function Spark adds in a later version stays refused until
someone reads what it does and lists it here. ``plan/sandbox.py`` checks every function call
Spark's own parser finds in a query's expressions against ``ALLOWED`` (plus the functions
and aggregates created in the engine), unless the engine is trusted.

How it was made (PySpark 4.3): every name of Spark's function registry with its group,

    reg = spark._jsparkSession.sessionState().functionRegistry()
    ids = reg.listFunction()
    for i in range(ids.size()):
        info = reg.lookupFunction(ids.apply(i)).get()  # an ExpressionInfo
        print(ids.apply(i).funcName(), info.getGroup(), info.getClassName())

then each group taken whole or in part, by reading what its functions do. Left out, with the
reason a client is told (``REFUSED``):

- misc_funcs that call into Spark's JVM (``reflect``, ``java_method``, ``try_reflect``), read
  file metadata (``input_file_*``), reveal who and what runs the server (``current_user``,
  ``user``, ``session_user``, ``current_catalog``, ``current_database``, ``current_schema``,
  ``current_path``, ``version``), depend on how Spark partitions a cycle rather than on the
  events (``spark_partition_id``, ``monotonically_increasing_id``) or fail a cycle on purpose
  (``assert_true``, ``raise_error``);
- avro_funcs and protobuf_funcs: their options may name schema or descriptor files;
- xml_funcs that parse XML (``from_xml``, ``schema_of_xml``, ``xpath*``): an XML parser may
  resolve external entities, i.e. read files or URLs;
- generator_funcs and ``json_tuple``: one row becomes many, which a SELECT list of a
  continuous query cannot express;
- window_funcs: they need ``OVER (...)``, which continuous queries do not run;
- agg_funcs other than count, sum, avg, min and max: the binder runs only those (and user
  aggregates); the others would be computed per cycle, not per window;
- table functions (``range``, ``read_files``, ...) never appear: FROM takes only names of
  the catalog's streams and tables.

Functions outside the registry (``read_files`` on other platforms, a persistent function of
a catalog, a qualified name such as ``system.builtin.abs``) are refused as unknown.
"""

from __future__ import annotations

from sparkcq.model.aggregate_functions import BUILTIN, DERIVED_AGGREGATES

# arithmetic, rounding, trigonometry, logarithms, random numbers (math_funcs)
MATH = frozenset({
    "%", "*", "+", "-", "/", "abs", "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh",
    "bin", "bround", "cbrt", "ceil", "ceiling", "conv", "cos", "cosh", "cot", "csc", "degrees",
    "div", "e", "exp", "expm1", "factorial", "floor", "greatest", "hex", "hypot", "least",
    "ln", "log", "log10", "log1p", "log2", "mod", "negative", "pi", "pmod", "positive", "pow",
    "power", "radians", "rand", "randn", "random", "rint", "round", "sec", "sign", "signum",
    "sin", "sinh", "sqrt", "tan", "tanh", "try_add", "try_divide", "try_mod", "try_multiply",
    "try_subtract", "unhex", "uniform", "width_bucket",
})

# comparisons, boolean logic, LIKE and regular expressions, bit operations
# (predicate_funcs, bitwise_funcs)
OPERATORS = frozenset({
    "!", "&", "<", "<<", "<=", "<=>", "=", "==", ">", ">=", ">>", ">>>", "^", "and",
    "bit_count", "bit_get", "equal_null", "getbit", "ilike", "in", "isnan", "isnotnull",
    "isnull", "like", "not", "or", "regexp", "regexp_like", "rlike", "shiftleft", "shiftright",
    "shiftrightunsigned", "|", "~",
})

# text: case, trimming, padding, search, regular expressions, encodings, URL parts
# (string_funcs, url_funcs: parse_url and url_decode only parse the text they are given)
STRING = frozenset({
    "ascii", "base64", "bit_length", "btrim", "char", "char_length", "character_length", "chr",
    "collate", "collation", "concat_ws", "contains", "decode", "elt", "encode", "endswith",
    "find_in_set", "format_number", "format_string", "from_base32", "initcap", "instr",
    "is_valid_utf8", "jaro_winkler_similarity", "lcase", "left", "len", "length",
    "levenshtein", "locate", "lower", "lpad", "ltrim", "luhn_check", "make_valid_utf8", "mask",
    "octet_length", "overlay", "parse_url", "position", "printf", "quote", "randstr",
    "regexp_count", "regexp_extract", "regexp_extract_all", "regexp_instr", "regexp_replace",
    "regexp_substr", "repeat", "replace", "right", "rpad", "rtrim", "sentences", "soundex",
    "space", "split", "split_part", "startswith", "substr", "substring", "substring_index",
    "to_base32", "to_binary", "to_char", "to_number", "to_varchar", "translate", "trim",
    "try_parse_url", "try_to_binary", "try_to_number", "try_url_decode", "try_validate_utf8",
    "ucase", "unbase64", "upper", "url_decode", "url_encode", "validate_utf8",
})

# dates, times, timestamps, intervals, time zones (datetime_funcs)
DATETIME = frozenset({
    "add_months", "convert_timezone", "curdate", "current_date", "current_time",
    "current_timestamp", "current_timezone", "date_add", "date_diff", "date_format",
    "date_from_unix_date", "date_part", "date_sub", "date_trunc", "dateadd", "datediff",
    "datepart", "day", "dayname", "dayofmonth", "dayofweek", "dayofyear", "extract",
    "from_unixtime", "from_utc_timestamp", "hour", "last_day", "localtime", "localtimestamp",
    "make_date", "make_dt_interval", "make_interval", "make_time", "make_timestamp",
    "make_timestamp_ltz", "make_timestamp_ntz", "make_ym_interval", "minute", "month",
    "monthname", "months_between", "next_day", "now", "quarter", "second", "session_window",
    "time_bucket", "time_diff", "time_from_micros", "time_from_millis", "time_from_seconds",
    "time_to_micros", "time_to_millis", "time_to_seconds", "time_trunc", "timestamp_micros",
    "timestamp_millis", "timestamp_nanos", "timestamp_seconds", "to_date", "to_time",
    "to_timestamp", "to_timestamp_ltz", "to_timestamp_ntz", "to_unix_timestamp",
    "to_utc_timestamp", "trunc", "try_make_interval", "try_make_timestamp",
    "try_make_timestamp_ltz", "try_make_timestamp_ntz", "try_to_date", "try_to_time",
    "try_to_timestamp", "unix_date", "unix_micros", "unix_millis", "unix_nanos",
    "unix_seconds", "unix_timestamp", "weekday", "weekofyear", "window", "window_time", "year",
})

# coalesce, if, nullif, nvl, ... (conditional_funcs)
CONDITIONAL = frozenset({
    "between", "coalesce", "if", "ifnull", "nanvl", "nullif", "nullifzero", "nvl", "nvl2",
    "when", "zeroifnull",
})

# casts by type name (conversion_funcs)
CONVERSION = frozenset({
    "bigint", "binary", "boolean", "cast", "date", "decimal", "double", "float", "int",
    "smallint", "string", "time", "timestamp", "tinyint",
})

# checksums and digests (hash_funcs)
HASH = frozenset({
    "crc32", "hash", "md5", "sha", "sha1", "sha2", "xxhash64",
})

# arrays, maps, structs (array_funcs, collection_funcs, map_funcs, struct_funcs)
COLLECTION = frozenset({
    "array", "array_append", "array_compact", "array_contains", "array_distinct",
    "array_except", "array_insert", "array_intersect", "array_join", "array_max", "array_min",
    "array_position", "array_prepend", "array_remove", "array_repeat", "array_size",
    "array_union", "arrays_overlap", "arrays_zip", "cardinality", "concat", "element_at",
    "flatten", "get", "map", "map_concat", "map_contains_key", "map_entries",
    "map_from_arrays", "map_from_entries", "map_keys", "map_values", "named_struct", "reverse",
    "sequence", "shuffle", "size", "slice", "sort_array", "str_to_map", "struct",
    "try_element_at",
})

# higher-order functions taking `x -> ...` lambdas (lambda_funcs)
LAMBDA = frozenset({
    "aggregate", "array_sort", "exists", "filter", "forall", "map_filter", "map_zip_with",
    "reduce", "transform", "transform_keys", "transform_values", "zip_with",
})

# JSON, CSV and variant values parsed from or written to strings (json_funcs but the
# generator json_tuple, csv_funcs, variant_funcs but the aggregate schema_of_variant_agg);
# to_xml only writes XML
PARSING = frozenset({
    "from_csv", "from_json", "get_json_object", "is_valid_variant", "is_variant_null",
    "json_array_length", "json_object_keys", "parse_json", "schema_of_csv", "schema_of_json",
    "schema_of_variant", "to_csv", "to_json", "to_variant_object", "to_xml", "try_parse_json",
    "try_variant_array_append", "try_variant_get", "try_variant_insert", "try_variant_set",
    "variant_array_append", "variant_delete", "variant_get", "variant_insert", "variant_set",
    "variant_strip_nulls",
})

# reading and merging sketches, vector arithmetic, geometry from WKB (sketch_funcs,
# vector_funcs but the aggregates vector_avg and vector_sum, st_funcs)
SKETCH_VECTOR_GEO = frozenset({
    "approx_top_k_estimate", "hll_sketch_estimate", "hll_union", "kll_sketch_get_n_bigint",
    "kll_sketch_get_n_double", "kll_sketch_get_n_float", "kll_sketch_get_quantile_bigint",
    "kll_sketch_get_quantile_double", "kll_sketch_get_quantile_float",
    "kll_sketch_get_rank_bigint", "kll_sketch_get_rank_double", "kll_sketch_get_rank_float",
    "kll_sketch_merge_bigint", "kll_sketch_merge_double", "kll_sketch_merge_float",
    "kll_sketch_to_string_bigint", "kll_sketch_to_string_double", "kll_sketch_to_string_float",
    "st_asbinary", "st_geogfromwkb", "st_geomfromwkb", "st_setsrid", "st_srid",
    "theta_difference", "theta_intersection", "theta_sketch_estimate", "theta_union",
    "tuple_difference_double", "tuple_difference_integer", "tuple_difference_theta_double",
    "tuple_difference_theta_integer", "tuple_intersection_double",
    "tuple_intersection_integer", "tuple_intersection_theta_double",
    "tuple_intersection_theta_integer", "tuple_sketch_estimate_double",
    "tuple_sketch_estimate_integer", "tuple_sketch_summary_double",
    "tuple_sketch_summary_integer", "tuple_sketch_theta_double", "tuple_sketch_theta_integer",
    "tuple_union_double", "tuple_union_integer", "tuple_union_theta_double",
    "tuple_union_theta_integer", "vector_cosine_similarity", "vector_inner_product",
    "vector_l2_distance", "vector_norm", "vector_normalize",
})

# the misc_funcs that compute on their arguments only: typeof, uuid, encryption with a
# key the query gives, bitmap positions
MISC = frozenset({
    "aes_decrypt", "aes_encrypt", "bitmap_bit_position", "bitmap_bucket_number",
    "bitmap_count", "hmac", "try_aes_decrypt", "typeof", "uuid",
})

# the aggregates a continuous query runs (plan/bind_aggregates.py)
AGGREGATES = frozenset({
    *BUILTIN, *DERIVED_AGGREGATES,
})

ALLOWED: frozenset[str] = (MATH | OPERATORS | STRING | DATETIME | CONDITIONAL | CONVERSION | HASH
                           | COLLECTION | LAMBDA | PARSING | SKETCH_VECTOR_GEO | MISC | AGGREGATES)

_JVM = "it calls Java code in Spark's JVM"
_FILES = "it reads files or file metadata on the server"
_HOST = "it tells who and what runs the server"
_PHYSICAL = "its value depends on how Spark partitions a cycle's data, not on the events"
_FAILS = "it fails the cycle on purpose"
_SCHEMA_FILES = "its options may name schema or descriptor files on the server"
_XML = "it parses XML, which may resolve external entities (read files or URLs)"
_GENERATOR = "it turns one row into many, which a SELECT list of a continuous query cannot"
_WINDOW = "it is a window function (OVER ...), which continuous queries do not run"

# the functions left out on purpose, with the reason a client is told
REFUSED: dict[str, str] = {
    **dict.fromkeys(("reflect", "java_method", "try_reflect"), _JVM),
    **dict.fromkeys(("input_file_name", "input_file_block_start", "input_file_block_length",
                     "read_files"), _FILES),
    **dict.fromkeys(("current_user", "user", "session_user", "current_catalog",
                     "current_database", "current_schema", "current_path", "version"), _HOST),
    **dict.fromkeys(("spark_partition_id", "monotonically_increasing_id"), _PHYSICAL),
    **dict.fromkeys(("assert_true", "raise_error"), _FAILS),
    **dict.fromkeys(("from_avro", "to_avro", "schema_of_avro", "from_protobuf", "to_protobuf"),
                    _SCHEMA_FILES),
    **dict.fromkeys(("from_xml", "schema_of_xml", "xpath", "xpath_boolean", "xpath_double",
                     "xpath_float", "xpath_int", "xpath_long", "xpath_number", "xpath_short",
                     "xpath_string"), _XML),
    **dict.fromkeys(("explode", "explode_outer", "inline", "inline_outer", "posexplode",
                     "posexplode_outer", "stack", "json_tuple"), _GENERATOR),
    **dict.fromkeys(("counter_diff", "cume_dist", "dense_rank", "lag", "lead", "nth_value",
                     "ntile", "percent_rank", "rank", "row_number"), _WINDOW),
}
