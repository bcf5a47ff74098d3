use super::*;
use crate::grammar::{compile, Syntax};
use crate::testing::matches_lazily as matches;

fn lark(text: &str) -> Hir {
    compile(text, Syntax::Lark, "root").unwrap()
}

fn refused(text: &str) -> (u32, u32, String) {
    match compile(text, Syntax::Lark, "root") {
        Err(Error::GrammarSyntax {
            line,
            column,
            message,
        }) => (line, column, message),
        other => panic!("expected a grammar error for {text:?}, got {other:?}"),
    }
}

const JSON: &str = r#"
?start: value
?value: object
      | array
      | ESCAPED_STRING
      | SIGNED_NUMBER      -> number
      | "true" | "false" | "null"
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : ESCAPED_STRING ":" value    // a member
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"#;

#[test]
fn lark_json_reads_with_ignored_white_space() {
    let h = lark(JSON);
    for (text, ok) in [
        (
            r#"{"a": [1, -2.5e3, true, {"b": null}], "c": "x\"y"}"#,
            true,
        ),
        ("  [ 1 ,2 ]\n", true),
        ("[1 2]", false),
        ("[1,]", false),
        (r#"{"a" 1}"#, false),
        ("tru e", false),
        ("[\"a\nb\"]", false),
    ] {
        assert_eq!(matches(&h, text), ok, "{text:?}");
    }
}

#[test]
fn operators_ranges_flags_and_left_recursion() {
    let h = lark(
        "?start: sum\n?sum: product\n    | sum (\"+\" | \"-\") product\n?product: atom | product \"*\" atom\n\
         atom: NUMBER | NAME | \"(\" sum \")\"\nNAME: /[a-z_]\\w*/i\nNUMBER: \"0\"..\"9\"+ \n%ignore \" \"",
    );
    for (text, ok) in [
        ("1+2*x", true),
        ("(A + b_1) * 3", true),
        ("1+", false),
        ("+1", false),
    ] {
        assert_eq!(matches(&h, text), ok, "{text:?}");
    }
    let h = lark("start: \"select\"i WORD~2..3 [\"!\"]\nWORD: \" \" /[a-z]/+\n");
    for (text, ok) in [
        ("SeLeCt ab cd", true),
        ("select ab cd ef!", true),
        ("select ab", false),
        ("sel ect ab cd", false),
        ("select ab cd ef gh", false),
    ] {
        assert_eq!(matches(&h, text), ok, "{text:?}");
    }
}

#[test]
fn imports_rename_and_bring_what_they_use() {
    let h = lark(
        "start: NUM (\",\" N)*\n%import common.SIGNED_NUMBER -> NUM\n%import common (INT, WS_INLINE)\n\
         N: INT\n%ignore WS_INLINE",
    );
    assert!(matches(&h, "-1.5e2, 7 ,8"));
    assert!(!matches(&h, "1, -7"));
}

#[test]
fn json_schemas_embed_with_their_recursion() {
    let h = lark(
        "start: \"<t>\" tree \"</t>\"\n\
         tree: %json {\"$defs\": {\"n\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}}, \"$ref\": \"#/$defs/n\"}",
    );
    assert!(matches!(h, Hir::Grammar(_)));
    assert!(matches(&h, "<t>[[], [[]]]</t>") && !matches(&h, "<t>[[]</t>"));
}

#[test]
fn refusals_name_line_and_column() {
    assert!(refused("start: A\nA.2: \"a\"").2.contains("priority"));
    assert_eq!(refused("start: A\nA.2: \"a\"").0, 2);
    assert!(refused("start: \"a\"\n_sep{x}: x (\",\" x)*")
        .2
        .contains("template"));
    assert!(refused("start: \"a\"\n%declare B").2.contains("%declare"));
    let (line, _, message) = refused("start: \"a\"\n%import mylib.X");
    assert!(line == 2 && message.contains("common"), "{message}");
    assert!(refused("start: B\n").2.contains("undefined"));
    assert!(refused("start: (\"a\"\n").2.contains("missing `)`"));
    assert!(refused("start: \"a\n").2.contains("unclosed string"));
    assert!(refused("start: A\nA: b\nb: \"x\"")
        .2
        .contains("terminals are made of terminals"));
    assert!(refused("start: a\na: b \"x\" | \"y\"\nb: a \"z\"")
        .2
        .contains("left-recursive"));
    assert!(refused("start: \"a\"\n%import common.NOPE")
        .2
        .contains("NOPE"));
    assert_eq!(refused("start: \"a\" /b/q").1, 15);
}
