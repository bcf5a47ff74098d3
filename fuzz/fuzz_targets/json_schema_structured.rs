//! Structure-aware JSON Schema fuzzing: an `arbitrary`-derived schema tree (types, properties,
//! required, items, enum, const, numeric and length bounds, patterns and formats from small sets,
//! anyOf/oneOf/allOf/not, `$ref` into `$defs`, recursion included) with the compiler options and
//! the draft, rendered to JSON and compiled as `json_schema` compiles raw bytes. Raw bytes rarely
//! get past the JSON parser into deep keyword interactions; every input here is a schema.

#![no_main]

use arbitrary::Arbitrary;
use guided_fuzz::{check_schema, schema_options};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

/// Deepest subschema rendered; below it a schema renders as `true`.
const MAX_DEPTH: usize = 5;
/// Most entries of one list (properties, branches, enum values, ...).
const MAX_ITEMS: usize = 4;

const NAMES: &[&str] = &["a", "b", "id", "name", "x y", "\u{e9}", ""];
const STRINGS: &[&str] = &["", "a", "abc", "\u{e9}", "\"", "\\", "0", "2020-01-01"];
const PATTERNS: &[&str] = &[
    "^[a-z]+$",
    "a|b",
    "[0-9]{2,4}",
    "^\\d+(\\.\\d+)?$",
    "x*",
    "(ab)*c?",
    "\\w+@\\w+",
    "^[^\\s]*$",
    ".*",
    "[A-Z]",
    "^$",
    "\u{e9}",
];
const FORMATS: &[&str] = &[
    "date",
    "date-time",
    "time",
    "email",
    "uuid",
    "ipv4",
    "ipv6",
    "hostname",
    "uri",
    "duration",
    "not-a-format",
];
const DRAFTS: &[Option<&str>] = &[
    None,
    Some("http://json-schema.org/draft-04/schema#"),
    Some("http://json-schema.org/draft-06/schema#"),
    Some("http://json-schema.org/draft-07/schema#"),
    Some("https://json-schema.org/draft/2019-09/schema"),
    Some("https://json-schema.org/draft/2020-12/schema"),
];

fn pick<'a>(set: &[&'a str], i: u8) -> &'a str {
    set[usize::from(i) % set.len()]
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Type {
    Null,
    Boolean,
    Integer,
    Number,
    String,
    Array,
    Object,
}

/// A number as `mantissa / 10^scale`, so that both integers and short decimals occur.
#[derive(Arbitrary, Debug)]
struct Num {
    mantissa: i32,
    scale: u8,
}

#[derive(Arbitrary, Debug)]
enum Literal {
    Null,
    Bool(bool),
    Num(Num),
    Str(u8),
    Array(Vec<Literal>),
    Object(Vec<(u8, Literal)>),
}

#[derive(Arbitrary, Debug)]
enum Keyword {
    Type(Type),
    Types(Type, Type),
    Properties(Vec<(u8, Schema)>),
    Required(Vec<u8>),
    AdditionalProperties(Box<Schema>),
    MinProperties(u8),
    MaxProperties(u8),
    Items(Box<Schema>),
    PrefixItems(Vec<Schema>),
    Contains(Box<Schema>),
    MinItems(u8),
    MaxItems(u8),
    UniqueItems(bool),
    Minimum(Num),
    Maximum(Num),
    ExclusiveMinimum(Num),
    ExclusiveMaximum(Num),
    MultipleOf(Num),
    MinLength(u8),
    MaxLength(u8),
    Pattern(u8),
    Format(u8),
    Enum(Vec<Literal>),
    Const(Literal),
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
    AllOf(Vec<Schema>),
    Not(Box<Schema>),
    Ref(u8),
}

#[derive(Arbitrary, Debug)]
enum Schema {
    Bool(bool),
    Object(Vec<Keyword>),
}

#[derive(Arbitrary, Debug)]
struct Options {
    strict: bool,
    coerce_one_of: bool,
    flexible_whitespace: bool,
    depth_bounds: bool,
    assert_formats: bool,
}

#[derive(Arbitrary, Debug)]
struct Document {
    draft: u8,
    root: Vec<Keyword>,
    defs: Vec<Schema>,
    options: Options,
    choices: Vec<u8>,
}

struct Renderer {
    defs: usize,
}

impl Renderer {
    fn num(n: &Num) -> Value {
        let scale = i32::from(n.scale % 4);
        if scale == 0 {
            json!(n.mantissa)
        } else {
            json!(f64::from(n.mantissa) / 10f64.powi(scale))
        }
    }

    fn literal(l: &Literal, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        match l {
            Literal::Null => Value::Null,
            Literal::Bool(b) => json!(b),
            Literal::Num(n) => Self::num(n),
            Literal::Str(i) => json!(pick(STRINGS, *i)),
            Literal::Array(v) => v
                .iter()
                .take(MAX_ITEMS)
                .map(|x| Self::literal(x, depth + 1))
                .collect(),
            Literal::Object(v) => Value::Object(
                v.iter()
                    .take(MAX_ITEMS)
                    .map(|(k, x)| (pick(NAMES, *k).to_string(), Self::literal(x, depth + 1)))
                    .collect(),
            ),
        }
    }

    fn schemas(&self, v: &[Schema], depth: usize) -> Value {
        v.iter()
            .take(MAX_ITEMS)
            .map(|s| self.schema(s, depth + 1))
            .collect()
    }

    fn schema(&self, s: &Schema, depth: usize) -> Value {
        match s {
            _ if depth > MAX_DEPTH => Value::Bool(true),
            Schema::Bool(b) => Value::Bool(*b),
            Schema::Object(keywords) => Value::Object(self.keywords(keywords, depth)),
        }
    }

    fn type_name(t: Type) -> &'static str {
        match t {
            Type::Null => "null",
            Type::Boolean => "boolean",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::String => "string",
            Type::Array => "array",
            Type::Object => "object",
        }
    }

    /// A later keyword of the same name replaces an earlier one, as in a JSON object.
    fn keywords(&self, keywords: &[Keyword], depth: usize) -> Map<String, Value> {
        let mut m = Map::new();
        for k in keywords.iter().take(2 * MAX_ITEMS) {
            let (name, value) = match k {
                Keyword::Type(t) => ("type", json!(Self::type_name(*t))),
                Keyword::Types(a, b) => ("type", json!([Self::type_name(*a), Self::type_name(*b)])),
                Keyword::Properties(v) => (
                    "properties",
                    Value::Object(
                        v.iter()
                            .take(MAX_ITEMS)
                            .map(|(n, s)| (pick(NAMES, *n).to_string(), self.schema(s, depth + 1)))
                            .collect(),
                    ),
                ),
                Keyword::Required(v) => (
                    "required",
                    v.iter()
                        .take(MAX_ITEMS)
                        .map(|n| json!(pick(NAMES, *n)))
                        .collect(),
                ),
                Keyword::AdditionalProperties(s) => {
                    ("additionalProperties", self.schema(s, depth + 1))
                }
                Keyword::MinProperties(n) => ("minProperties", json!(n % 4)),
                Keyword::MaxProperties(n) => ("maxProperties", json!(n % 4)),
                Keyword::Items(s) => ("items", self.schema(s, depth + 1)),
                Keyword::PrefixItems(v) => ("prefixItems", self.schemas(v, depth)),
                Keyword::Contains(s) => ("contains", self.schema(s, depth + 1)),
                Keyword::MinItems(n) => ("minItems", json!(n % 5)),
                Keyword::MaxItems(n) => ("maxItems", json!(n % 5)),
                Keyword::UniqueItems(b) => ("uniqueItems", json!(b)),
                Keyword::Minimum(n) => ("minimum", Self::num(n)),
                Keyword::Maximum(n) => ("maximum", Self::num(n)),
                Keyword::ExclusiveMinimum(n) => ("exclusiveMinimum", Self::num(n)),
                Keyword::ExclusiveMaximum(n) => ("exclusiveMaximum", Self::num(n)),
                Keyword::MultipleOf(n) => ("multipleOf", Self::num(n)),
                Keyword::MinLength(n) => ("minLength", json!(n % 8)),
                Keyword::MaxLength(n) => ("maxLength", json!(n % 8)),
                Keyword::Pattern(i) => ("pattern", json!(pick(PATTERNS, *i))),
                Keyword::Format(i) => ("format", json!(pick(FORMATS, *i))),
                Keyword::Enum(v) => (
                    "enum",
                    v.iter()
                        .take(MAX_ITEMS)
                        .map(|l| Self::literal(l, depth + 1))
                        .collect(),
                ),
                Keyword::Const(l) => ("const", Self::literal(l, depth + 1)),
                Keyword::AnyOf(v) => ("anyOf", self.schemas(v, depth)),
                Keyword::OneOf(v) => ("oneOf", self.schemas(v, depth)),
                Keyword::AllOf(v) => ("allOf", self.schemas(v, depth)),
                Keyword::Not(s) => ("not", self.schema(s, depth + 1)),
                // With no definitions, `#` refers to the root: recursion either way.
                Keyword::Ref(_) if self.defs == 0 => ("$ref", json!("#")),
                Keyword::Ref(i) => (
                    "$ref",
                    json!(format!("#/$defs/d{}", usize::from(*i) % self.defs)),
                ),
            };
            m.insert(name.to_string(), value);
        }
        m
    }
}

fuzz_target!(|doc: Document| {
    let defs = &doc.defs[..doc.defs.len().min(3)];
    let r = Renderer { defs: defs.len() };
    let mut root = r.keywords(&doc.root, 0);
    if let Some(draft) = DRAFTS[usize::from(doc.draft) % DRAFTS.len()] {
        root.insert("$schema".into(), json!(draft));
    }
    if !defs.is_empty() {
        let defs = defs
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("d{i}"), r.schema(s, 1)))
            .collect();
        root.insert("$defs".into(), Value::Object(defs));
    }
    let o = &doc.options;
    let opts = guided_core::json_schema::SchemaOptions {
        strict: o.strict,
        coerce_one_of: o.coerce_one_of,
        whitespace: o.flexible_whitespace.then(|| "flexible".to_string()),
        depth_bounds: o.depth_bounds,
        assert_formats: o.assert_formats,
        ..schema_options()
    };
    check_schema(&Value::Object(root), &opts, &doc.choices);
});
