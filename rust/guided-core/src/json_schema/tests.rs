//! End-to-end tests of the schema compiler: hand-checked texts that must and must not match, and
//! the error table (class, keyword, pointer) for schemas that must be refused.

use serde_json::{json, Value};

use super::matcher::matches;
use super::{json_schema_to_hir, json_schema_to_regex, SchemaOptions};
use crate::error::Error;

fn check_with(schema: Value, opts: &SchemaOptions, good: &[&str], bad: &[&str]) {
    let c = json_schema_to_hir(&schema, opts).unwrap_or_else(|e| panic!("{schema}: {e}"));
    for t in good {
        assert!(matches(&c.hir, t), "{schema}\nshould accept {t}\n{}", c.hir);
    }
    for t in bad {
        assert!(
            !matches(&c.hir, t),
            "{schema}\nshould refuse {t}\n{}",
            c.hir
        );
    }
}

fn check(schema: Value, good: &[&str], bad: &[&str]) {
    check_with(schema, &SchemaOptions::default(), good, bad)
}

/// [`check`], and the compiled language holds no intersection or complement: a proof (of
/// disjoint `oneOf` branches, say) made one unnecessary.
fn check_without_booleans(schema: Value, good: &[&str], bad: &[&str]) {
    let c = json_schema_to_hir(&schema, &SchemaOptions::default()).unwrap();
    assert!(
        !c.hir.has_boolean_operators(),
        "{schema}\nneeds none, yet: {}",
        c.hir
    );
    check(schema, good, bad)
}

#[test]
fn scalars() {
    check(json!({"type": "null"}), &["null"], &["0", "\"null\""]);
    check(
        json!({"type": "boolean"}),
        &["true", "false"],
        &["1", "null"],
    );
    check(
        json!({"type": "integer"}),
        &["0", "-7", "12", "3.0"],
        &["1.5", "01", "\"1\"", "-", "1e+16"],
    );
    check(
        json!({"type": "number", "minimum": 1.5, "exclusiveMaximum": 3}),
        &["1.5", "2", "2.999", "2.5e0"],
        &["1.4", "3", "3.0", "-2"],
    );
    check(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &["\"ab\"", "\"a\\nb\"", "\"\\u00e9\\u00e9\""],
        &["\"a\"", "\"abcd\"", "ab"],
    );
    check(
        json!({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}),
        &["\"abc\""],
        &["\"abcd\"", "\"\"", "\"aB\""],
    );
    check(
        json!({"pattern": "b"}),
        &["\"abc\"", "1", "null"],
        &["\"ac\""],
    );
    check(
        json!(true),
        &["1", "\"x\"", "[1,{\"a\":null}]"],
        &["", "[1,]"],
    );
    check(json!(false), &[], &["1", "null"]);
}

#[test]
fn objects_in_declared_order() {
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"],
        "additionalProperties": false
    });
    check(
        schema,
        &[
            r#"{"b":"x"}"#,
            r#"{"a": 1, "b": "x"}"#,
            r#"{"b":"x","c":true}"#,
            r#"{"a":1,"b":"","c":false}"#,
        ],
        &[
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"b":"x","a":1}"#,
            r#"{"b":"x","d":1}"#,
            r#"{"b":"x",}"#,
            r#"{,"b":"x"}"#,
        ],
    );
    // Open objects take extras after the declared members.
    check(
        json!({"properties": {"a": {"const": 1}}}),
        &[
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"a":1,"z":[true]}"#,
            r#"{"z":"q"}"#,
            "7",
        ],
        &[r#"{"a":2}"#, r#"{"z":1,"a":1}"#, r#"{"a":1,"a":1}"#],
    );
    check(
        json!({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": false}),
        &[r#"{"x-a":1,"x-b":2}"#, r#"{}"#],
        &[r#"{"y":1}"#, r#"{"x-a":"s"}"#],
    );
    check(
        json!({"type": "object", "minProperties": 1, "maxProperties": 2, "properties": {"a": {}, "b": {}, "c": {}}}),
        &[r#"{"a":1}"#, r#"{"b":1,"c":[1,2]}"#, r#"{"a":1,"zz":2}"#],
        &[r#"{}"#, r#"{"a":1,"b":2,"c":3}"#, r#"{"a":1,"b":2,"q":3}"#],
    );
    check(
        json!({"type": "object", "propertyNames": {"maxLength": 2}}),
        &[r#"{"ab":1}"#, r#"{}"#],
        &[r#"{"abc":1}"#],
    );
}

#[test]
fn arrays() {
    check(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}),
        &["[1]", "[1, 2, 3]", "[1,2]"],
        &["[]", "[1,2,3,4]", "[1,\"a\"]", "[1,]"],
    );
    check(
        json!({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        &["[]", "[\"a\"]", "[\"a\",1]"],
        &["[1]", "[\"a\",1,2]"],
    );
    check(
        json!({"type": "array", "contains": {"const": 5}, "maxContains": 2}),
        &["[5]", "[1,5,2,5]", "[5,5]"],
        &["[]", "[1,2]", "[5,5,5]"],
    );
    check(
        json!({"type": "array", "items": {"enum": ["a", "b", 1]}, "uniqueItems": true}),
        &["[]", "[\"a\",1]", "[\"b\",\"a\",1]", "[1.0,\"a\"]"],
        &["[\"a\",\"a\"]", "[1,\"b\",1.0]"],
    );
}

/// Found by the differential test against `jsonschema`: the second `contains` of a conjunction
/// replaced the first one's language instead of intersecting with it.
#[test]
fn every_contains_of_a_conjunction_holds() {
    check(
        json!({"allOf": [{"contains": {"type": "string"}}], "contains": {"type": "null"}}),
        &["[\"a\",null]", "[null,1,\"b\"]"],
        &["[\"a\"]", "[null]", "[false]", "[]"],
    );
    check(
        json!({"allOf": [{"contains": {}}], "contains": {"type": "null"}}),
        &["[null]"],
        &["[false]", "[]"],
    );
}

/// Found by the differential test: a `not` of one required name was folded into "the name is
/// absent" and let every non-object through, though `required` holds for them.
#[test]
fn a_negated_required_name_admits_only_objects() {
    check(
        json!({"not": {"required": ["a"]}}),
        &["{}", "{\"b\":1}"],
        &["null", "1", "\"a\"", "[]", "{\"a\":1}"],
    );
    check(
        json!({"not": {"anyOf": [{"required": ["a"]}, {"type": "string"}]}}),
        &["{}"],
        &["null", "\"x\"", "{\"a\":1}"],
    );
}

#[test]
fn combinators() {
    check(
        json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}),
        &["1", "\"a\""],
        &["\"ab\"", "1.5"],
    );
    // Overlapping oneOf: exactly one branch.
    check(
        json!({"oneOf": [{"minimum": 2}, {"maximum": 5}]}),
        &["1", "6"],
        &["3", "\"x\""],
    );
    check(
        json!({"not": {"type": "string"}}),
        &["1", "null"],
        &["\"a\""],
    );
    check(
        json!({"type": "object", "not": {"properties": {"a": {"const": 1}}, "required": ["a"]}}),
        &[r#"{}"#, r#"{"a":2}"#],
        &[r#"{"a":1}"#, r#"{"a":1.0}"#],
    );
    check(
        json!({"if": {"type": "integer"}, "then": {"minimum": 10}, "else": {"type": "string"}}),
        &["10", "\"s\""],
        &["5", "1.5", "null"],
    );
    check(
        json!({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}),
        &[r#"{"a":1,"b":2}"#, r#"{"b":2}"#],
        &[r#"{"a":1}"#, r#"{"b":"x"}"#],
    );
    check(
        json!({"type": "object", "dependentRequired": {"a": ["b"]}, "properties": {"a": {}, "b": {}}}),
        &[r#"{}"#, r#"{"b":1}"#, r#"{"a":1,"b":2}"#],
        &[r#"{"a":1}"#],
    );
}

#[test]
fn one_of_branches_need_only_be_disjoint_where_the_conjunction_holds() {
    // The discriminator is required by the conjunction, not by the branches; values that are not
    // objects satisfy every branch, so exactly-one refuses them.
    let tagged = json!({
        "required": ["kind"],
        "properties": {"name": {"type": "string"}},
        "oneOf": [
            {"properties": {"kind": {"enum": ["a"]}, "x": {"type": "integer"}}},
            {"properties": {"kind": {"enum": ["b"]}}, "required": ["y"]},
            {"properties": {"kind": {"const": "c"}}}
        ]
    });
    check_without_booleans(
        tagged,
        &[
            r#"{"kind":"a"}"#,
            r#"{"kind":"a","x":1}"#,
            r#"{"kind":"b","y":null}"#,
            r#"{"kind":"c","x":"s"}"#,
        ],
        &[
            "1",
            "null",
            "\"a\"",
            "[]",
            "{}",
            r#"{"kind":"b"}"#,
            r#"{"kind":"a","x":"s"}"#,
            r#"{"kind":"d"}"#,
        ],
    );
    // A type only one branch admits whole stays: strings of one character, and every non-string.
    check(
        json!({"oneOf": [{"type": "string"}, {"minLength": 2}]}),
        &["1", "null", "{}", "\"a\"", "\"\""],
        &["\"ab\"", "\"abc\""],
    );
    // Both admit every non-object; among objects, one with "b" and a bad "a" is the only overlap
    // left out.
    check(
        json!({"oneOf": [{"properties": {"a": {"type": "integer"}}}, {"required": ["b"]}]}),
        &["{}", r#"{"a":1}"#, r#"{"a":"x","b":1}"#],
        &[
            "1",
            "null",
            "\"s\"",
            "[]",
            r#"{"b":1}"#,
            r#"{"a":1,"b":1}"#,
            r#"{"a":"x"}"#,
        ],
    );
    // A name one branch requires and the other's patterns do not admit in its closed object.
    let selectors = json!({"oneOf": [
        {"type": "object", "properties": {"ios": {}}, "required": ["ios"], "additionalProperties": false},
        {"type": "object", "patternProperties": {"^[0-9]x$": {}}, "additionalProperties": false}
    ]});
    check_without_booleans(
        selectors,
        &[r#"{"ios":1}"#, r#"{"2x":1}"#, "{}"],
        &[r#"{"ios":1,"2x":1}"#, r#"{"x":1}"#, "1"],
    );
    // A required string property whose patterns in the two branches match no common string.
    let bundles = json!({
        "required": ["file"],
        "properties": {"file": {"type": "string"}},
        "oneOf": [
            {"properties": {"file": {"pattern": "\\.js$"}}},
            {"properties": {"file": {"pattern": "\\.(css|less)$"}}}
        ]
    });
    check_without_booleans(
        bundles,
        &[r#"{"file":"a.js"}"#, r#"{"file":"b.less"}"#],
        &[r#"{"file":"a.txt"}"#, r#"{"file":1}"#, "{}", "\"a.js\""],
    );
    // Patterns that share a string (`a.js.css`) prove nothing, and the overlap is left out.
    check(
        json!({
            "required": ["file"],
            "properties": {"file": {"type": "string"}},
            "oneOf": [{"properties": {"file": {"pattern": "\\.js"}}}, {"properties": {"file": {"pattern": "css$"}}}]
        }),
        &[r#"{"file":"a.js"}"#, r#"{"file":"a.css"}"#],
        &[r#"{"file":"a.js.css"}"#, r#"{"file":"a.txt"}"#],
    );
    // An integral constant is not a number without a fraction part.
    check(
        json!({"enum": [1, 1.5, "a"], "not": {"type": "integer"}}),
        &["1.5", "\"a\""],
        &["1", "1.0"],
    );
    // A branch read only through what it cannot claim (`enum`) claims no whole type.
    check(
        json!({"oneOf": [{"enum": [1, "a"]}, {"type": "integer"}]}),
        &["\"a\"", "2"],
        &["1", "\"b\"", "null"],
    );
}

/// Each draft's meaning, hand-checked against the `jsonschema` package's validator for that
/// draft (the corpus's labels come from it).
#[test]
fn each_draft_reads_its_own_keywords() {
    const D4: &str = "http://json-schema.org/draft-04/schema#";
    const D6: &str = "http://json-schema.org/draft-06/schema#";
    const D7: &str = "http://json-schema.org/draft-07/schema#";
    const D2019: &str = "https://json-schema.org/draft/2019-09/schema";
    // Draft 4's `integer` is a spelling; from draft 6 on it is a value.
    check(
        json!({"$schema": D4, "type": "integer", "minimum": 2}),
        &["2", "12345"],
        &["12345.0", "2.00", "1"],
    );
    check(
        json!({"$schema": D6, "type": "integer"}),
        &["7", "7.0"],
        &["7.5"],
    );
    check(
        json!({"$schema": D4, "not": {"type": "integer"}}),
        &["3.0", "3.5", "\"a\""],
        &["3", "-0"],
    );
    check(
        json!({"$schema": D4, "type": "integer", "enum": [3.0, 4.5, "a"]}),
        &["3"],
        &["3.0", "4.5", "\"a\""],
    );
    check(
        json!({"$schema": D4, "enum": [[1, 2.5]], "items": {"type": "integer"}}),
        &[],
        &["[1,2.5]"],
    );
    check(
        json!({"$schema": D4, "enum": [[1], [1.0, 2]], "items": {"type": "integer"}}),
        &["[1]", "[1,2]"],
        &["[1.0]", "[1.0,2]"],
    );
    // Keywords a draft does not have are annotations there.
    check(json!({"$schema": D4, "const": 3}), &["4"], &[]);
    check(
        json!({"$schema": D4, "contains": {"type": "string"}, "propertyNames": {"maxLength": 1}}),
        &["[1]", "{\"ab\":1}"],
        &[],
    );
    check(
        json!({"$schema": D6, "if": {"type": "string"}, "then": {"maxLength": 1}}),
        &["\"ab\""],
        &[],
    );
    check(
        json!({"$schema": D7, "dependentRequired": {"a": ["b"]}, "prefixItems": [{"type": "string"}]}),
        &["{\"a\":1}", "[1]"],
        &[],
    );
    check(
        json!({"$schema": D7, "contains": {"type": "string"}, "maxContains": 1}),
        &["[\"a\",\"b\"]"],
        &["[1]"],
    );
    check(
        json!({"$schema": D2019, "prefixItems": [{"type": "string"}], "items": [{"type": "null"}]}),
        &["[null]"],
        &["[\"a\"]"],
    );
    check(
        json!({"$schema": D2019, "dependentRequired": {"a": ["b"]}}),
        &["{\"a\":2,\"b\":1}"],
        &["{\"a\":1}"],
    );
    // Older keywords kept in 2020-12 for compatibility (the suite's optional tests ask for it).
    check(
        json!({"dependencies": {"a": ["b"]}}),
        &["{}"],
        &["{\"a\":1}"],
    );
    // Draft 3 is refused in strict mode.
    assert!(json_schema_to_hir(
        &json!({"$schema": "http://json-schema.org/draft-03/schema#"}),
        &SchemaOptions::default()
    )
    .is_err_and(|e| e.to_string().contains("draft 3")));
}

#[test]
fn references_and_recursion() {
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}},
        "$ref": "#/$defs/node"
    });
    check(
        tree.clone(),
        &[r#"{"v":1}"#, r#"{"v":1,"kids":[{"v":2,"kids":[]}]}"#],
        &[r#"{"kids":[]}"#, r#"{"v":1,"kids":[{"v":"x"}]}"#],
    );
    // Unrolled max_recursion_depth times: deeper trees are cut, never wrongly accepted.
    let deep = r#"{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"v":4}]}]}]}"#;
    check(tree, &[], &[deep]);
    let linked =
        json!({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]});
    let e = json_schema_to_hir(&linked, &SchemaOptions::default()).unwrap_err();
    assert!(
        matches!(e, Error::SizeLimit { ref limit, .. } if limit == "max_recursion_depth"),
        "{e}"
    );
}

#[test]
fn enums_and_consts_by_value() {
    check(
        json!({"enum": [1, "a\"b", {"x": [1, 2]}, null]}),
        &[
            "1",
            "1.0",
            "\"a\\\"b\"",
            r#"{"x":[1,2]}"#,
            r#"{ "x": [1, 2] }"#,
            "null",
        ],
        &["2", "\"a\"", r#"{"x":[2,1]}"#],
    );
    check(
        json!({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1}),
        &["\"a\""],
        &["1", "\"bb\""],
    );
}

#[test]
fn whitespace_options() {
    let flexible = SchemaOptions {
        whitespace: Some("flexible".into()),
        ..SchemaOptions::default()
    };
    check_with(
        json!({"type": "object", "properties": {"a": {"type": "array"}}}),
        &flexible,
        &["{\n  \"a\": [\n    1\n  ]\n}"],
        &[],
    );
    let bad = SchemaOptions {
        whitespace: Some("x".into()),
        ..SchemaOptions::default()
    };
    assert!(matches!(
        json_schema_to_hir(&json!({}), &bad),
        Err(Error::RegexSyntax { .. })
    ));
}

#[test]
fn regex_text_is_python_compatible_without_boolean_keywords() {
    let (text, warnings) = json_schema_to_regex(
        &json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}),
        &SchemaOptions::default(),
    )
    .unwrap();
    assert!(warnings.is_empty());
    assert!(!text.contains("(?&") && !text.contains("(?~"), "{text}");
}

/// Every refusal names its class, keyword and pointer.
#[test]
fn error_table() {
    let cases: Vec<(Value, &str, &str, &str)> = vec![
        (
            json!({"$ref": "http://example.com/x.json"}),
            "unsupported",
            "$ref",
            "",
        ),
        (
            json!({"properties": {"a": {"pattern": "(?=x)"}}}),
            "unsupported",
            "pattern",
            "/properties/a",
        ),
        (json!({"format": "int32"}), "unsupported", "format", ""),
        (
            json!({"items": {"type": "string"}, "uniqueItems": true}),
            "unsupported",
            "uniqueItems",
            "",
        ),
        (json!({"type": "strng"}), "unsupported", "type", ""),
        (json!({"minLength": -1}), "unsupported", "minLength", ""),
        (json!({"multipleOf": 0}), "unsupported", "multipleOf", ""),
        (json!({"allOf": []}), "unsupported", "allOf", ""),
        (
            json!({"$defs": {"a": {"$ref": "#/$defs/missing"}}, "$ref": "#/$defs/a"}),
            "unsupported",
            "$ref",
            "/$defs/a",
        ),
        (
            json!({"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#"}}}),
            "size",
            "max_recursion_depth",
            "",
        ),
    ];
    for (schema, class, keyword, pointer) in cases {
        match json_schema_to_hir(&schema, &SchemaOptions::default()) {
            Err(Error::UnsupportedSchema {
                keyword: k,
                pointer: p,
                ..
            }) if class == "unsupported" => {
                assert_eq!((k.as_str(), p.as_str()), (keyword, pointer), "{schema}");
            }
            Err(Error::SizeLimit { limit, .. }) if class == "size" => {
                assert_eq!(limit, keyword, "{schema}")
            }
            other => panic!("{schema}: expected {class} {keyword}, got {other:?}"),
        }
    }
    // Non-strict mode ignores the keywords whose omission only widens the language.
    let lax = SchemaOptions {
        strict: false,
        ..SchemaOptions::default()
    };
    let c = json_schema_to_hir(
        &json!({"items": {"type": "string"}, "uniqueItems": true, "format": "int32"}),
        &lax,
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
}

#[test]
fn deep_schemas_hit_limits_not_the_stack() {
    let mut s = json!({"type": "integer"});
    for _ in 0..500 {
        s = json!({"type": "array", "items": s});
    }
    let e = json_schema_to_hir(&s, &SchemaOptions::default()).unwrap_err();
    assert!(
        matches!(e, Error::SizeLimit { ref limit, .. } if limit == "max_nesting"),
        "{e}"
    );
}

/// Whether two expressions denote the same language: the symmetric difference of their automata
/// is empty.
fn same_language(a: &crate::regex::Hir, b: &crate::regex::Hir) -> bool {
    use crate::dfa::{product, Dfa, DfaConfig};
    let config = DfaConfig {
        max_states: 200_000,
    };
    let (da, db) = (
        Dfa::from_hir(a, &config).unwrap(),
        Dfa::from_hir(b, &config).unwrap(),
    );
    let only = |x: &Dfa, y: &Dfa| {
        let not_y = product::complement(y, &config).unwrap();
        product::intersection(x, &not_y, &config)
            .unwrap()
            .matches_nothing()
    };
    only(&da, &db) && only(&db, &da)
}

#[test]
fn memoized_locations_compile_to_the_language_of_a_plain_walk() {
    // Definitions met at several places and at several recursion counts: a location reused where
    // a different count applies would let one level too many (or too few) through.
    let schemas = [
        json!({
            "$defs": {
                "node": {"properties": {"w": {"$ref": "#/$defs/wrap"}}, "additionalProperties": false},
                "wrap": {"properties": {"n": {"$ref": "#/$defs/node"}}, "additionalProperties": false}
            },
            "properties": {"w": {"$ref": "#/$defs/wrap"}, "t": {"$ref": "#/$defs/node"}},
            "additionalProperties": false
        }),
        json!({
            "$defs": {
                "t": {"type": "object", "properties": {
                    "l": {"$ref": "#/$defs/t"}, "r": {"$ref": "#/$defs/t"}, "v": {"$ref": "#/$defs/leaf"}
                }, "additionalProperties": false},
                "leaf": {"type": "integer", "minimum": 3}
            },
            "properties": {"a": {"$ref": "#/$defs/t"}, "b": {"$ref": "#/$defs/leaf"},
                           "c": {"items": {"$ref": "#/$defs/t"}}},
            "required": ["b"]
        }),
        json!({
            "$defs": {"e": {"anyOf": [{"type": "integer"},
                                      {"type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 2}]}},
            "properties": {"x": {"$ref": "#/$defs/e"}, "y": {"not": {"$ref": "#/$defs/e"}},
                           "z": {"type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 2}},
            "additionalProperties": false
        }),
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/tree",
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {"data": {"type": "string"},
                           "children": {"type": "array", "items": {"$dynamicRef": "#node"}, "maxItems": 2}},
            "additionalProperties": false
        }),
        json!({
            "properties": {"a": {}, "b": {"type": "array", "items": {}}, "c": {"properties": {"d": {}}}},
            "additionalProperties": {"type": "object"}
        }),
    ];
    for schema in &schemas {
        for depth in 1..=3 {
            let opts = SchemaOptions {
                max_recursion_depth: depth,
                max_free_depth: 1,
                ..SchemaOptions::default()
            };
            let memo = super::compile_schema(schema, &opts, true, false);
            let plain = super::compile_schema(schema, &opts, false, false);
            match (memo, plain) {
                (Ok(m), Ok(p)) => assert!(same_language(&m.hir, &p.hir), "{schema} at {depth}"),
                (Err(m), Err(p)) => assert_eq!(m.to_string(), p.to_string(), "{schema}"),
                (m, p) => panic!("{schema} at {depth}: {m:?} against {p:?}"),
            }
        }
    }
}

#[test]
fn copies_of_a_value_language_are_shared_not_rebuilt() {
    // Sixty members, each an object admitting extras, so each holding "any JSON value".
    let props: serde_json::Map<String, Value> = (0..60)
        .map(|i| (format!("p{i}"), json!({"type": "object"})))
        .collect();
    let schema = json!({"type": "object", "properties": props, "required": ["p0"]});
    // Free values two deep keep the whole schema's eager automaton small.
    let opts = SchemaOptions {
        max_free_depth: 2,
        ..SchemaOptions::default()
    };
    let c = json_schema_to_hir(&schema, &opts).unwrap();
    let unique = c.hir.unique_size_within(usize::MAX).unwrap();
    let expanded = c.hir.expanded_size_within(usize::MAX).unwrap();
    assert!(
        expanded > 20 * unique,
        "{unique} nodes held, {expanded} spelled out"
    );
    let config = crate::dfa::DfaConfig {
        max_states: 100_000,
    };
    let dfa = crate::dfa::Dfa::from_hir(&c.hir, &config).unwrap();
    assert!(dfa.is_match(br#"{"p0": {"x": [1, {"y": null}]}, "p59": {}, "z": "w"}"#));
    assert!(!dfa.is_match(br#"{"p0": 1}"#));
    assert!(!dfa.is_match(br#"{"p1": {}}"#));
    // The printed pattern spells out every copy; past the limit it is refused, by name.
    let tight = SchemaOptions {
        max_hir_nodes: 2 * unique,
        ..opts
    };
    match json_schema_to_regex(&schema, &tight) {
        Err(Error::SizeLimit { limit, .. }) => assert_eq!(limit, "max_pattern_nodes"),
        other => panic!("expected max_pattern_nodes, got {other:?}"),
    }
}

#[test]
fn residue_automata_are_embedded_and_printed_only_on_request() {
    use crate::regex::{parse, Hir};
    // A step of 7: the automaton's expression is some tens of thousands of nodes, printed.
    let seven = json!({"type": "integer", "multipleOf": 7});
    let c = json_schema_to_hir(&seven, &SchemaOptions::default()).unwrap();
    let mut automata = 0;
    c.hir.walk_unique(&mut Default::default(), |h| {
        automata += usize::from(matches!(h, Hir::Automaton(_)));
        true
    });
    assert!(automata > 0, "the residue counter stays an automaton");
    let (pattern, _) = json_schema_to_regex(&seven, &SchemaOptions::default()).unwrap();
    assert!(same_language(&parse(&pattern).unwrap(), &c.hir));
    check(
        seven,
        &["0", "-7", "700", "7.00"],
        &["1", "7.5", "70e1", "-0.7"],
    );
    // Inside shared parts, printed once per occurrence.
    let step = json!({"type": "integer", "multipleOf": 7});
    let pair = json!({"type": "array", "prefixItems": [step, step], "items": false, "minItems": 2});
    let c = json_schema_to_hir(&pair, &SchemaOptions::default()).unwrap();
    let (pattern, _) = json_schema_to_regex(&pair, &SchemaOptions::default()).unwrap();
    assert!(same_language(&parse(&pattern).unwrap(), &c.hir));
    check(pair, &["[14,-21]", "[0, 7]"], &["[14,1]", "[14]"]);
    // Steps with large odd factors: exact as automata, too large to print.
    for (schema, good, bad) in [
        (
            json!({"type": "number", "multipleOf": 6.75}),
            &["6.75", "-13.5", "27", "0.0"][..],
            &["6.7", "3.375", "1"][..],
        ),
        (
            json!({"type": "integer", "multipleOf": 37, "minimum": 100}),
            &["111", "37000"][..],
            &["37", "112"][..],
        ),
    ] {
        let opts = SchemaOptions::default();
        let c = json_schema_to_hir(&schema, &opts).unwrap();
        let dfa = crate::dfa::Dfa::from_hir(&c.hir, &Default::default()).unwrap();
        for t in good {
            assert!(dfa.is_match(t.as_bytes()), "{schema} should accept {t}");
        }
        for t in bad {
            assert!(!dfa.is_match(t.as_bytes()), "{schema} should refuse {t}");
        }
        check(schema.clone(), good, bad);
        match json_schema_to_regex(&schema, &opts) {
            Err(Error::SizeLimit { limit, .. }) => assert_eq!(limit, "max_pattern_nodes"),
            other => panic!("{schema}: expected a size limit, got {other:?}"),
        }
    }
}

#[test]
fn free_values_and_their_automata_are_built_once_per_process() {
    use crate::dfa::DfaConfig;
    use crate::nfa::{EmbeddedAutomaton, Nfa, NfaConfig};
    use crate::regex::Hir;
    use std::sync::Arc;
    // Whitespace of its own, so that no other test has built these free values first.
    let opts = SchemaOptions {
        whitespace: Some("[ ]{0,3}".into()),
        ..SchemaOptions::default()
    };
    let first = json!({"type": "object", "properties": {"a": {}}});
    let second = json!({"type": "array", "items": {"type": "object"}});
    let pinned = |h: &Hir| {
        let mut nodes = Vec::new();
        h.walk_unique(&mut Default::default(), |x| {
            if matches!(x, Hir::Shared(s) if s.is_pinned()) {
                nodes.push(x.clone());
            }
            true
        });
        nodes
    };
    let a = json_schema_to_hir(&first, &opts).unwrap().hir;
    let b = json_schema_to_hir(&second, &opts).unwrap().hir;
    let (in_a, in_b) = (pinned(&a), pinned(&b));
    // The two schemas hold the same free-value node ...
    let common = in_a
        .iter()
        .find(|x| in_b.contains(x))
        .expect("a free value in common");
    // ... and two constructions embed one automaton for it.
    let config = DfaConfig {
        max_states: 200_000,
    };
    let automaton = || {
        let nfa = Nfa::new(common, &NfaConfig::default(), &config).unwrap();
        match &nfa.automata()[0] {
            EmbeddedAutomaton::Built(d) => Arc::clone(d),
            EmbeddedAutomaton::Lazy(_) => panic!("a free value is built whole"),
        }
    };
    assert!(Arc::ptr_eq(&automaton(), &automaton()));
    // A construction whose limit the kept automaton exceeds refuses it, as if it built it.
    let tight = DfaConfig { max_states: 10 };
    assert!(matches!(
        Nfa::new(common, &NfaConfig::default(), &tight),
        Err(Error::SizeLimit { .. })
    ));
    // The language is unchanged by the sharing.
    assert!(matches(&a, r#"{"a":{"b":[1,{"c":null}]}}"#));
    assert!(!matches(&a, r#"{"a":{"b":[1,{"c":null}]}"#));
}

/// Whether the lazy automaton of `hir` (a grammar or not) accepts `text`.
fn lazy_accepts(hir: &crate::regex::Hir, text: &str) -> bool {
    use crate::dfa::{Anchors, Determinizer, DfaConfig};
    use crate::nfa::{Nfa, NfaConfig};
    let nfa = Nfa::new(hir, &NfaConfig::default(), &DfaConfig::default()).expect("nfa");
    let mut d = Determinizer::new(nfa, Anchors::WHOLE_TEXT, 100_000).expect("determinizer");
    let (mut state, mut row) = (1, Vec::new());
    for b in text.bytes() {
        d.next_row(state, &mut row).expect("row");
        state = row[d.classes().get(b) as usize];
    }
    d.is_accepting(state)
}

#[test]
fn grammar_mode_keeps_recursion_as_calls() {
    use super::{is_unrolling_needed, json_schema_to_grammar};
    use crate::regex::Hir;
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}},
        "$ref": "#/$defs/node"
    });
    let opts = SchemaOptions::default();
    let g = json_schema_to_grammar(&tree, &opts).unwrap();
    assert!(matches!(&g.hir, Hir::Grammar(r) if !r.rules().is_empty()));
    let mut deep = r#"{"v":0}"#.to_string();
    for i in 1..30 {
        deep = format!(r#"{{"v":{i},"kids":[{deep},{{"v":-1}}]}}"#);
    }
    assert!(lazy_accepts(&g.hir, &deep));
    assert!(!lazy_accepts(
        &g.hir,
        &deep.replace(r#""v":-1"#, r#""v":"x""#)
    ));
    assert!(!lazy_accepts(&g.hir, &deep[..deep.len() - 1]));
    // The unrolled form stops at max_recursion_depth.
    let unrolled = json_schema_to_hir(&tree, &opts).unwrap();
    assert!(!lazy_accepts(&unrolled.hir, &deep));

    // Free values are a rule that calls itself: as deep as the call stack, not max_free_depth.
    let free = json_schema_to_grammar(&json!({}), &opts).unwrap();
    assert!(matches!(&free.hir, Hir::Grammar(_)));
    let nested = format!("{}1{}", "[{\"a\":".repeat(40), "}]".repeat(40));
    assert!(lazy_accepts(&free.hir, &nested));
    assert!(!lazy_accepts(
        &json_schema_to_hir(&json!({}), &opts).unwrap().hir,
        &nested
    ));

    // A schema without recursion or free values compiles as the regular form does.
    let flat = json!({"type": "array", "items": {"type": "integer"}});
    assert!(!matches!(
        json_schema_to_grammar(&flat, &opts).unwrap().hir,
        Hir::Grammar(_)
    ));

    // Under a `not` the layout is strict and locations are not memoized: recursion would unroll,
    // so it is refused unless depth bounds are allowed, and then it unrolls as the regular form.
    let negated = json!({
        "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/list"}}},
        "allOf": [{"$ref": "#/$defs/list"}, {"not": {"type": "array", "maxItems": 0}}]
    });
    assert!(matches!(
        json_schema_to_grammar(&negated, &opts).unwrap_err(),
        Error::UnsupportedSchema { keyword, .. } if keyword == "not"
    ));
    let bounded = SchemaOptions {
        depth_bounds: true,
        ..SchemaOptions::default()
    };
    let g = json_schema_to_grammar(&negated, &bounded).unwrap();
    assert!(!matches!(g.hir, Hir::Grammar(_)));
    assert!(same_language(
        &g.hir,
        &json_schema_to_hir(&negated, &opts).unwrap().hir
    ));
    // A member count of a recursive object needs its depth: refused with the keyword and the
    // pointer, never unrolled into a narrower language. The regular form unrolls, as documented.
    let counted = json!({
        "$defs": {"t": {"type": "object", "properties": {"k": {"$ref": "#/$defs/t"}}, "maxProperties": 1}},
        "$ref": "#/$defs/t"
    });
    let e = json_schema_to_grammar(&counted, &opts).unwrap_err();
    assert!(
        matches!(&e, Error::UnsupportedSchema { keyword, pointer, .. }
            if keyword == "minProperties/maxProperties" && pointer == "/$defs/t"),
        "{e}"
    );
    assert!(!is_unrolling_needed(&e));
    assert!(json_schema_to_hir(&counted, &opts).is_ok());
    // With depth bounds allowed, the caller is asked to unroll instead.
    assert!(is_unrolling_needed(
        &json_schema_to_grammar(&counted, &bounded).unwrap_err()
    ));

    // Free items under `contains` sit under a strict layout, where they cannot become calls:
    // refused with the keyword, or bounded with a warning when allowed.
    let contains = json!({"type": "array", "contains": {"type": "string"}});
    let e = json_schema_to_grammar(&contains, &opts).unwrap_err();
    assert!(
        matches!(&e, Error::UnsupportedSchema { keyword, pointer, .. }
            if keyword == "contains" && pointer == "/contains"),
        "{e}"
    );
    let c = json_schema_to_grammar(&contains, &bounded).unwrap();
    assert!(
        c.warnings.iter().any(|w| w.starts_with("bounded contains")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn a_reference_loop_through_if_is_refused_not_followed_forever() {
    use super::json_schema_to_grammar;
    let schema = json!({
        "$defs": {"node": {"if": {"$ref": "#/$defs/node"}, "then": {"type": "null"}, "else": {"type": "number"}}},
        "$ref": "#/$defs/node"
    });
    let opts = SchemaOptions::default();
    for e in [
        json_schema_to_hir(&schema, &opts).unwrap_err(),
        json_schema_to_grammar(&schema, &opts).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::SizeLimit { ref limit, .. } if limit.starts_with("max_nesting")),
            "{e}"
        );
    }
}

#[test]
fn max_hir_nodes_refuses_exactly_past_the_result_size() {
    use super::json_schema_to_grammar;
    // The limit is checked against the result's size only when what the locations charged does
    // not already prove it within; at the result's own size it must pass, one below it fail,
    // for plain, shared, free and recursive languages alike.
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }}},
        "$ref": "#/$defs/node"
    });
    let schemas = [
        json!({"type": "string", "maxLength": 12}),
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"enum": [1, "x"]}},
               "additionalProperties": {"type": "number"}}),
        json!({"anyOf": [{"type": "array", "items": {}}, {"type": "object", "required": ["k"]}]}),
        json!({}),
        tree,
    ];
    type Compile = fn(&Value, &SchemaOptions) -> crate::error::Result<super::Compiled>;
    let compilers: [(&str, Compile); 2] = [
        ("unrolled", json_schema_to_hir),
        ("recursive", json_schema_to_grammar),
    ];
    for schema in &schemas {
        for (how, compile) in compilers {
            let size = compile(schema, &SchemaOptions::default())
                .unwrap()
                .hir
                .unique_size();
            let at = SchemaOptions {
                max_hir_nodes: size,
                ..SchemaOptions::default()
            };
            assert!(compile(schema, &at).is_ok(), "{how} {schema} at {size}");
            let below = SchemaOptions {
                max_hir_nodes: size - 1,
                ..SchemaOptions::default()
            };
            match compile(schema, &below) {
                Err(Error::SizeLimit { limit, .. }) => assert_eq!(limit, "max_hir_nodes"),
                other => panic!(
                    "{how} {schema} below {size}: {:?}",
                    other.map(|c| c.hir.unique_size())
                ),
            }
        }
    }
}
