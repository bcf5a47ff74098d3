use serde_json::{json, Value};

use super::*;
use crate::testing::matches_lazily;

/// Whether `text` is in the tag's language, by the lazy construction the token index uses.
fn accepts(tag: &Value, text: &str) -> bool {
    matches_lazily(&compile(tag, &TagOptions::xgrammar()).unwrap().hir, text)
}

fn structural(format: Value) -> Value {
    json!({"type": "structural_tag", "format": format})
}

fn call_tag() -> Value {
    json!({
        "type": "tag",
        "begin": "<tool_call>",
        "content": {"type": "json_schema", "json_schema": {
            "type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false
        }},
        "end": "</tool_call>",
    })
}

const CALL: &str = r#"<tool_call>{"a": 1}</tool_call>"#;

/// Each case's expectations are what xgrammar 0.2.9 answers for the same format and text.
#[test]
fn triggered_tags_follow_xgrammar_for_each_repetition() {
    let texts = [
        String::new(),
        "hi".into(),
        format!("hi {CALL}"),
        CALL.into(),
        format!("{CALL} bye"),
        format!("{CALL}{CALL}"),
        format!("hi{CALL}x{CALL}y"),
        "hi <tool_ca".into(),
        "hi <tool_call> x".into(),
        format!("{CALL}<tool_call>"),
    ];
    let expected = [
        ((false, false), [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]),
        ((true, false), [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]),
        ((false, true), [1, 1, 1, 1, 0, 0, 0, 1, 0, 0]),
        ((true, true), [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
    ];
    for ((at_least_one, stop_after_first), answers) in expected {
        let tag = structural(json!({
            "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [call_tag()],
            "at_least_one": at_least_one, "stop_after_first": stop_after_first,
        }));
        for (text, answer) in texts.iter().zip(answers) {
            assert_eq!(
                accepts(&tag, text),
                answer == 1,
                "{text:?} with at_least_one={at_least_one}, stop_after_first={stop_after_first}"
            );
        }
    }
}

#[test]
fn free_text_cannot_begin_a_call_that_its_tag_completes() {
    let tag = structural(json!({
        "type": "triggered_tags", "triggers": ["aa"],
        "tags": [{"type": "tag", "begin": "aab", "content": {"type": "const_string", "value": "C"}, "end": "D"}],
    }));
    for (text, ok) in [
        ("aabCD", true),
        ("aaabCD", false),
        ("a", true),
        ("aa", false),
        ("xaabCDaabCD", true),
        ("xaabCDxaabCD", true),
        ("xaabCDaaabCD", false),
    ] {
        assert_eq!(accepts(&tag, text), ok, "{text:?}");
    }
}

#[test]
fn text_inside_a_tag_stops_at_the_end_string() {
    let any = json!({"type": "any_text"});
    let think = |content: Value, end: Value| {
        structural(json!({"type": "tag", "begin": "<t>", "content": content, "end": end}))
    };
    let plain = think(any.clone(), json!("</t>"));
    for (text, ok) in [
        ("<t></t>", true),
        ("<t>abc</t>", true),
        ("<t>a</t>b</t>", false),
        ("<t>a</t", false),
        ("<t>a</thin</t>", true),
    ] {
        assert_eq!(accepts(&plain, text), ok, "{text:?}");
    }
    let ends = think(any.clone(), json!(["</a>", "</b>"]));
    assert!(accepts(&ends, "<t>x</a>") && accepts(&ends, "<t>x</b>"));
    assert!(!accepts(&ends, "<t>x</a>y</b>"));
    let leading = think(
        json!({"type": "sequence", "elements": [any, {"type": "const_string", "value": "x"}]}),
        json!("</t>"),
    );
    assert!(accepts(&leading, "<t>abx</t>") && !accepts(&leading, "<t>a</t>bx</t>"));
    let bounded = structural(json!({"type": "any_text", "max_chars": 2, "excludes": ["q"]}));
    for (text, ok) in [
        ("", true),
        ("ab", true),
        ("abc", false),
        ("aq", false),
        ("éé", true),
    ] {
        assert_eq!(accepts(&bounded, text), ok, "{text:?}");
    }
    // At the top level, any text goes, the text a sequence continues with included.
    let open = structural(json!({"type": "sequence", "elements": [
        {"type": "any_text"}, {"type": "const_string", "value": "END"}]}));
    assert!(accepts(&open, "aENDbEND") && !accepts(&open, "abc"));
}

#[test]
fn separated_tags_and_dispatch_follow_xgrammar() {
    let separated = |extra: Value| {
        let mut f = json!({"type": "tags_with_separator", "tags": [call_tag()], "separator": ","});
        f.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        structural(f)
    };
    let texts = [
        "",
        CALL,
        &format!("{CALL},{CALL}"),
        &format!("{CALL},"),
        "x",
    ];
    for (extra, answers) in [
        (json!({}), [1, 1, 1, 0, 0]),
        (json!({"at_least_one": true}), [0, 1, 1, 0, 0]),
        (json!({"stop_after_first": true}), [1, 1, 0, 0, 0]),
    ] {
        let tag = separated(extra.clone());
        for (text, answer) in texts.iter().zip(answers) {
            assert_eq!(accepts(&tag, text), answer == 1, "{text:?} with {extra}");
        }
    }
    let rule = json!([["<f>", {"type": "const_string", "value": "1</f>"}]]);
    let looping = structural(json!({"type": "dispatch", "rules": rule}));
    let once = structural(json!({"type": "dispatch", "rules": rule, "loop": false}));
    for (text, loops, stops) in [
        ("", true, true),
        ("x", true, true),
        ("x<f>1</f>y<f>1</f>", true, false),
        ("x<f>1</f>", true, true),
        ("x<f>1</f>y", true, false),
        ("<f>2", false, false),
    ] {
        assert_eq!(accepts(&looping, text), loops, "{text:?} looping");
        assert_eq!(accepts(&once, text), stops, "{text:?} once");
    }
}

#[test]
fn embedded_languages_keep_their_own_semantics() {
    let regex = structural(json!({"type": "sequence", "elements": [
        {"type": "regex", "pattern": "^a+$"}, {"type": "const_string", "value": "b"}]}));
    assert!(accepts(&regex, "aab") && !accepts(&regex, "b"));
    // xgrammar's dialect: `.` matches a newline.
    let dot = structural(json!({"type": "regex", "pattern": "a.c"}));
    assert!(accepts(&dot, "a\nc"));
    let repeat = structural(json!({"type": "repeat", "min": 1, "max": 2,
        "content": {"type": "const_string", "value": "a"}}));
    for (text, ok) in [("", false), ("a", true), ("aa", true), ("aaa", false)] {
        assert_eq!(accepts(&repeat, text), ok, "{text:?}");
    }
    let any_json = structural(json!({"type": "json_schema", "json_schema": true}));
    assert!(accepts(&any_json, "1") && accepts(&any_json, r#"{"a":[1]}"#));
}

/// Two recursive languages, compiled apart, called from one grammar: each keeps its own rules.
#[test]
fn recursive_schemas_and_grammars_share_one_grammar() {
    let tree = json!({"$ref": "#/$defs/t", "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}});
    let parens = "root ::= \"(\" root* \")\"";
    let tag = structural(
        json!({"type": "triggered_tags", "triggers": ["<"], "tags": [
            {"type": "tag", "begin": "<j>", "content": {"type": "json_schema", "json_schema": tree}, "end": "</j>"},
            {"type": "tag", "begin": "<g>", "content": {"type": "grammar", "grammar": parens}, "end": "</g>"},
        ]}),
    );
    let Hir::Grammar(ref g) = compile(&tag, &TagOptions::xgrammar()).unwrap().hir else {
        panic!("recursive languages make a grammar")
    };
    assert!(g.rules().len() >= 2);
    for (text, ok) in [
        ("x<j>[[],[[]]]</j>y<g>(()(()))</g>", true),
        ("<g>(()</g>", false),
        ("<j>[[]</j>", false),
        ("<j>[(])</j>", false),
        ("<g>[]</g>", false),
        ("<g>()</g><j>[]</j>", true),
    ] {
        assert_eq!(accepts(&tag, text), ok, "{text:?}");
    }
}

#[test]
fn legacy_structures_are_triggered_tags() {
    let tag = json!({"type": "structural_tag", "triggers": ["<function="], "structures": [
        {"begin": "<function=f>", "schema": {"type": "integer"}, "end": "</function>"}]});
    assert!(accepts(&tag, "ok <function=f>12</function> done"));
    assert!(!accepts(&tag, "<function=f>x</function>"));
    assert!(!accepts(&tag, "<function=g>1</function>"));
}

#[test]
fn refusals_name_the_construct_and_where_it_is() {
    let refused =
        |format: Value| compile(&structural(format), &TagOptions::xgrammar()).unwrap_err();
    let token = refused(json!({"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"}, {"type": "token", "token": 5}]}));
    assert!(
        matches!(&token, Error::UnsupportedSchema { keyword, pointer, .. }
            if keyword == "type" && pointer == "/format/elements/1"),
        "{token:?}"
    );
    let style = refused(json!({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}));
    assert!(matches!(&style, Error::UnsupportedSchema { keyword, .. } if keyword == "style"));
    let inner = refused(json!({"type": "tag", "begin": "<a>", "end": "</a>",
        "content": {"type": "json_schema", "json_schema": {"type": "string", "format": "no-such"}}}));
    assert!(
        matches!(&inner, Error::UnsupportedSchema { pointer, .. }
            if pointer.starts_with("/format/content/json_schema")),
        "{inner:?}"
    );
    let untriggered = refused(json!({"type": "triggered_tags", "triggers": ["<x>"],
        "tags": [{"type": "tag", "begin": "<f>", "content": {"type": "const_string", "value": "1"}, "end": "</f>"}]}));
    assert!(
        matches!(&untriggered, Error::Invalid(m) if m.contains("/format/tags/0")),
        "{untriggered:?}"
    );
    let grammar = refused(json!({"type": "grammar", "grammar": "root ::= undefined"}));
    assert!(
        matches!(&grammar, Error::GrammarSyntax { line: 1, .. }),
        "{grammar:?}"
    );
    for malformed in [
        json!({"type": "sequence"}),
        json!({"type": "nope"}),
        json!([1]),
        json!({"type": "repeat", "min": 3, "max": 2, "content": {"type": "any_text"}}),
    ] {
        assert!(
            matches!(refused(malformed.clone()), Error::Invalid(_)),
            "{malformed}"
        );
    }
}
