//! Structural tags: free text with tool calls in it, each call's arguments held to a JSON Schema.
//!
//! A tool-calling model writes prose, and where it decides to call a tool it writes a trigger
//! (`<tool_call>`, `<function=`), then the call, then a closing string, then prose again. Only
//! the calls need constraining, but they must be constrained exactly, and the prose around them
//! must not be able to smuggle in a half-written call. xgrammar describes such outputs with a
//! small JSON language of *formats* (its `StructuralTag`, which vLLM and SGLang accept as a
//! `structural_tag` request); this module reads that language and compiles it to one [`Hir`], so
//! the token index walks a tool call exactly as it walks any other constraint: no second
//! matcher, no mode switch, and the masks inside a call are the schema's masks.
//!
//! The formats map onto expressions one to one. `const_string` is a literal, `regex` a pattern
//! (xgrammar's dialect by default), `json_schema` the schema compiler's language, `grammar` a
//! GBNF grammar; `sequence`, `or`, `optional`, `star`, `plus` and `repeat` are concatenation,
//! alternation and repetition; `tag` is `begin content end`. The two formats that hold free text
//! are where the semantics live:
//!
//! - Free text is text that does not contain any trigger (nor any `excludes` string, nor the end
//!   string of the tag the text stands in): a complement, which the automaton layer builds lazily
//!   like any other. A model that writes a trigger has started a call, so `triggered_tags` is
//!   `(F T)* F` with `T` any of the tags; `at_least_one` makes it start with a call
//!   (`T (F T)* F`), `stop_after_first` ends it after one (`F T | F`), both make it one call.
//!   `dispatch` is the same with the matched pattern consumed before its format, and `loop`
//!   choosing between the first and third forms. xgrammar reads free text left to right and
//!   dispatches at the first trigger it sees, so free text must also not end in the beginning of
//!   a trigger that the tag's own begin completes (with trigger `aa` and begin `aab`, text `a`
//!   followed by the tag is read as a tag starting one character early): those endings are
//!   excluded as well, which keeps the language xgrammar's.
//! - `any_text` inside a tag is text without the tag's end strings (the call ends at the first
//!   end string), elsewhere any text; `excludes` removes more, `max_chars` bounds its length.
//!
//! Each embedded schema or grammar may be recursive, a [`Hir::Grammar`] of its own; their rules
//! are gathered into one grammar ([`Hir::lift_rules`]), so the tag's language is one expression
//! with calls, built lazily by the index as a generation visits it.
//!
//! Token-level formats (`token`, `any_tokens`, `token_triggered_tags`, ...) and the XML argument
//! styles are refused with [`Error::UnsupportedSchema`] naming the construct and its JSON pointer
//! in the tag, as is anything else this module does not enforce exactly; a tag that is not
//! well-formed (a missing field, a tag no trigger starts) is an [`Error::Invalid`].

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::grammar::{self, Syntax};
use crate::json_schema::{self, SchemaOptions};
use crate::regex::{parse_with, ClassSet, Dialect, Hir, ParserConfig};

/// How a structural tag's embedded languages are compiled.
#[derive(Debug, Clone, Default)]
pub struct TagOptions {
    /// Options for every `json_schema` format (a format's `max_whitespace_cnt` overrides the
    /// whitespace).
    pub schema: SchemaOptions,
    /// The dialect of `regex` formats (xgrammar's, whose format this is, unless told otherwise).
    pub dialect: Dialect,
    /// Compile schemas with recursion unrolled rather than kept as calls (the retry when a
    /// recursive language stands where only an automaton can, see
    /// [`json_schema::is_unrolling_needed`]).
    pub unroll: bool,
}

impl TagOptions {
    /// The options xgrammar's own structural tags mean: its regex dialect, default schema
    /// options.
    pub fn xgrammar() -> Self {
        TagOptions {
            dialect: Dialect::Xgrammar,
            ..TagOptions::default()
        }
    }
}

/// A compiled structural tag: its language, and warnings from the schemas it embeds.
#[derive(Debug, Clone)]
pub struct CompiledTag {
    /// The language of the whole output.
    pub hir: Hir,
    /// What the schema compiler ignored (non-strict mode only).
    pub warnings: Vec<String>,
}

/// Compiles a structural tag: `{"type": "structural_tag", "format": {...}}`, the legacy
/// `{"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}`
/// that vLLM accepts, or a bare format.
pub fn compile(tag: &Value, opts: &TagOptions) -> Result<CompiledTag> {
    let mut lowering = Lowering {
        opts,
        rules: Vec::new(),
        warnings: Vec::new(),
    };
    let object = as_object(tag, "")?;
    let start = match object.get("type").and_then(Value::as_str) {
        Some("structural_tag") if object.contains_key("format") => {
            lowering.format(field(object, "format", "")?, "/format", &[])?
        }
        Some("structural_tag") => {
            let legacy = legacy_format(object)?;
            lowering.format(&legacy, "", &[])?
        }
        _ => lowering.format(tag, "", &[])?,
    };
    Ok(CompiledTag {
        hir: Hir::grammar(start, lowering.rules),
        warnings: lowering.warnings,
    })
}

/// The `triggered_tags` format a legacy structural tag (vLLM's `structures` and `triggers`)
/// means.
fn legacy_format(object: &Map<String, Value>) -> Result<Value> {
    let structures = field(object, "structures", "")?
        .as_array()
        .ok_or_else(|| malformed("/structures", "must be an array"))?;
    let mut tags = Vec::with_capacity(structures.len());
    for (i, s) in structures.iter().enumerate() {
        let at = format!("/structures/{i}");
        let s = as_object(s, &at)?;
        let schema = s
            .get("schema")
            .or_else(|| s.get("parameters"))
            .ok_or_else(|| malformed(&at, "needs a \"schema\""))?;
        tags.push(serde_json::json!({
            "type": "tag",
            "begin": field(s, "begin", &at)?,
            "content": {"type": "json_schema", "json_schema": schema},
            "end": field(s, "end", &at)?,
        }));
    }
    Ok(serde_json::json!({
        "type": "triggered_tags",
        "triggers": field(object, "triggers", "")?,
        "tags": tags,
    }))
}

struct Lowering<'o> {
    opts: &'o TagOptions,
    /// The rules of every embedded grammar, gathered into one.
    rules: Vec<Hir>,
    warnings: Vec<String>,
}

/// What a free-text format does after a call.
#[derive(Debug, Clone, Copy)]
struct Repetition {
    /// The output must start with a call.
    at_least_one: bool,
    /// The output ends after the first call.
    stop_after_first: bool,
}

/// A call a free-text format dispatches to: the text that opens it (which starts with one of the
/// triggers) and its language, opening text included.
struct Call {
    begin: String,
    hir: Hir,
}

impl Lowering<'_> {
    /// The language of the format at `at`; `ends` are the end strings of the tag it stands in,
    /// which its free text must not contain.
    fn format(&mut self, value: &Value, at: &str, ends: &[String]) -> Result<Hir> {
        let object = as_object(value, at)?;
        let kind = field(object, "type", at)?
            .as_str()
            .ok_or_else(|| malformed(at, "\"type\" must be a string"))?;
        let flag = |name: &str| -> Result<bool> {
            match object.get(name) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(malformed(&format!("{at}/{name}"), "must be a boolean")),
            }
        };
        match kind {
            "const_string" => Ok(Hir::literal(&string(object, "value", at)?)),
            "regex" => self.regex(&string(object, "pattern", at)?, at),
            "json_schema" => self.json_schema(object, at),
            "grammar" => self.grammar(object, at),
            "any_text" => self.any_text(object, at, ends),
            "sequence" | "or" => {
                let parts = self.elements(object, at, ends)?;
                Ok(if kind == "sequence" {
                    Hir::concat(parts)
                } else {
                    Hir::alternation(parts)
                })
            }
            "optional" | "star" | "plus" | "repeat" => {
                let content = self.format(
                    field(object, "content", at)?,
                    &format!("{at}/content"),
                    ends,
                )?;
                let (min, max) = match kind {
                    "optional" => (0, Some(1)),
                    "star" => (0, None),
                    "plus" => (1, None),
                    _ => repeat_bounds(object, at)?,
                };
                Ok(Hir::repeat(content, min, max))
            }
            "tag" => Ok(self.call(value, at)?.hir),
            "triggered_tags" => {
                let triggers = strings(object, "triggers", at)?;
                if triggers.iter().any(String::is_empty) {
                    return Err(malformed(&format!("{at}/triggers"), "a trigger is empty"));
                }
                let calls = self.tags(object, at)?;
                for (i, call) in calls.iter().enumerate() {
                    if !triggers.iter().any(|t| call.begin.starts_with(t.as_str())) {
                        return Err(malformed(
                            &format!("{at}/tags/{i}"),
                            "the tag's begin starts with none of the triggers",
                        ));
                    }
                }
                let excludes = optional_strings(object, "excludes", at)?;
                let repetition = Repetition {
                    at_least_one: flag("at_least_one")?,
                    stop_after_first: flag("stop_after_first")?,
                };
                Ok(dispatch(&triggers, calls, &excludes, ends, repetition))
            }
            "dispatch" => {
                let rules = field(object, "rules", at)?
                    .as_array()
                    .ok_or_else(|| malformed(&format!("{at}/rules"), "must be an array"))?;
                let mut triggers = Vec::with_capacity(rules.len());
                let mut calls = Vec::with_capacity(rules.len());
                for (i, rule) in rules.iter().enumerate() {
                    let rat = format!("{at}/rules/{i}");
                    let [pattern, content] = rule.as_array().map(Vec::as_slice).unwrap_or(&[])
                    else {
                        return Err(malformed(&rat, "must be a [pattern, format] pair"));
                    };
                    let pattern = pattern
                        .as_str()
                        .filter(|p| !p.is_empty())
                        .ok_or_else(|| {
                            malformed(&format!("{rat}/0"), "must be a non-empty string")
                        })?
                        .to_string();
                    let content = self.format(content, &format!("{rat}/1"), ends)?;
                    calls.push(Call {
                        hir: Hir::concat([Hir::literal(&pattern), content]),
                        begin: pattern.clone(),
                    });
                    triggers.push(pattern);
                }
                let excludes = optional_strings(object, "excludes", at)?;
                let looping = object
                    .get("loop")
                    .is_none_or(|l| l.as_bool() != Some(false));
                let repetition = Repetition {
                    at_least_one: false,
                    stop_after_first: !looping,
                };
                Ok(dispatch(&triggers, calls, &excludes, ends, repetition))
            }
            "tags_with_separator" => {
                let separator = string(object, "separator", at)?;
                let calls = self.tags(object, at)?;
                let one = Hir::alternation(calls.into_iter().map(|c| c.hir));
                let many = if flag("stop_after_first")? {
                    one
                } else {
                    let more = Hir::concat([Hir::literal(&separator), one.clone()]);
                    Hir::concat([one, Hir::repeat(more, 0, None)])
                };
                Ok(if flag("at_least_one")? {
                    many
                } else {
                    Hir::optional(many)
                })
            }
            "token"
            | "exclude_token"
            | "any_tokens"
            | "token_triggered_tags"
            | "token_dispatch" => Err(unsupported(
                "type",
                at,
                format!("the token-level format {kind:?} (guided's languages are over text)"),
            )),
            "qwen_xml_parameter" => Err(unsupported(
                "type",
                at,
                "the XML argument format \"qwen_xml_parameter\"".into(),
            )),
            other => Err(malformed(at, &format!("unknown format type {other:?}"))),
        }
    }

    fn elements(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
        ends: &[String],
    ) -> Result<Vec<Hir>> {
        let elements = field(object, "elements", at)?
            .as_array()
            .ok_or_else(|| malformed(&format!("{at}/elements"), "must be an array"))?;
        if elements.is_empty() {
            return Err(malformed(&format!("{at}/elements"), "is empty"));
        }
        elements
            .iter()
            .enumerate()
            .map(|(i, e)| self.format(e, &format!("{at}/elements/{i}"), ends))
            .collect()
    }

    /// A `tag`: `begin content end`, with the content's free text kept clear of the end strings.
    fn call(&mut self, value: &Value, at: &str) -> Result<Call> {
        let object = as_object(value, at)?;
        if object
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "tag")
        {
            return Err(malformed(&format!("{at}/type"), "must be \"tag\""));
        }
        let begin = match field(object, "begin", at)? {
            Value::String(s) => s.clone(),
            Value::Object(_) => {
                return Err(unsupported(
                    "begin",
                    at,
                    "a token as a tag's begin (guided's languages are over text)".into(),
                ))
            }
            _ => return Err(malformed(&format!("{at}/begin"), "must be a string")),
        };
        let ends = match field(object, "end", at)? {
            Value::String(s) => vec![s.clone()],
            Value::Array(v) if !v.is_empty() => v
                .iter()
                .map(|e| {
                    e.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| malformed(&format!("{at}/end"), "must hold strings"))
                })
                .collect::<Result<_>>()?,
            Value::Object(_) => {
                return Err(unsupported(
                    "end",
                    at,
                    "a token as a tag's end (guided's languages are over text)".into(),
                ))
            }
            _ => {
                return Err(malformed(
                    &format!("{at}/end"),
                    "must be a string or a non-empty array of strings",
                ))
            }
        };
        let content = self.format(
            field(object, "content", at)?,
            &format!("{at}/content"),
            &ends,
        )?;
        let hir = Hir::concat([
            Hir::literal(&begin),
            content,
            Hir::alternation(ends.iter().map(|e| Hir::literal(e))),
        ]);
        Ok(Call { begin, hir })
    }

    fn tags(&mut self, object: &Map<String, Value>, at: &str) -> Result<Vec<Call>> {
        let tags = field(object, "tags", at)?
            .as_array()
            .ok_or_else(|| malformed(&format!("{at}/tags"), "must be an array"))?;
        if tags.is_empty() {
            return Err(malformed(&format!("{at}/tags"), "is empty"));
        }
        tags.iter()
            .enumerate()
            .map(|(i, t)| self.call(t, &format!("{at}/tags/{i}")))
            .collect()
    }

    fn regex(&mut self, pattern: &str, at: &str) -> Result<Hir> {
        let config = ParserConfig {
            dialect: self.opts.dialect,
            ..ParserConfig::default()
        };
        let hir = parse_with(pattern, &config)?;
        json_schema::whole_match(&hir).map_err(|why| {
            unsupported(
                "pattern",
                at,
                format!("{why} in {pattern:?}: a regex here matches a part of the output"),
            )
        })
    }

    fn json_schema(&mut self, object: &Map<String, Value>, at: &str) -> Result<Hir> {
        if let Some(style) = object.get("style").and_then(Value::as_str) {
            if style != "json" {
                return Err(unsupported(
                    "style",
                    at,
                    format!("the argument style {style:?} (only \"json\" is supported)"),
                ));
            }
        }
        if object.get("any_order").and_then(Value::as_bool) == Some(true) {
            return Err(unsupported(
                "any_order",
                at,
                "properties in any order (guided writes them in declared order)".into(),
            ));
        }
        if !optional_strings(object, "excludes", at)?.is_empty() {
            return Err(unsupported(
                "excludes",
                at,
                "substrings excluded from a schema's strings".into(),
            ));
        }
        let mut opts = self.opts.schema.clone();
        match object.get("max_whitespace_cnt") {
            None | Some(Value::Null) => {}
            Some(n) => {
                let n = n.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                    malformed(
                        &format!("{at}/max_whitespace_cnt"),
                        "must be a positive integer",
                    )
                })?;
                opts.whitespace = Some(format!("[ \\n\\r\\t]{{0,{n}}}"));
            }
        }
        let schema = field(object, "json_schema", at)?;
        let compiled = if self.opts.unroll {
            json_schema::json_schema_to_hir(schema, &opts)
        } else {
            json_schema::json_schema_to_grammar(schema, &opts)
        }
        .map_err(|e| match e {
            Error::UnsupportedSchema {
                keyword,
                pointer,
                message,
            } => Error::UnsupportedSchema {
                keyword,
                pointer: format!("{at}/json_schema{pointer}"),
                message,
            },
            other => other,
        })?;
        self.warnings.extend(compiled.warnings);
        Ok(compiled.hir.lift_rules(&mut self.rules))
    }

    fn grammar(&mut self, object: &Map<String, Value>, at: &str) -> Result<Hir> {
        let syntax = object
            .get("syntax")
            .and_then(Value::as_str)
            .unwrap_or("ebnf");
        let Some(syntax) = Syntax::from_name(syntax) else {
            return Err(unsupported(
                "syntax",
                at,
                format!("grammar syntax {syntax:?} (supported: \"ebnf\", \"gbnf\")"),
            ));
        };
        let text = string(object, "grammar", at)?;
        let hir = grammar::compile(&text, syntax, "root").map_err(|e| match e {
            Error::GrammarSyntax {
                line,
                column,
                message,
            } => Error::GrammarSyntax {
                line,
                column,
                message: format!("{message} (in the grammar at {at:?})"),
            },
            other => other,
        })?;
        Ok(hir.lift_rules(&mut self.rules))
    }

    fn any_text(&mut self, object: &Map<String, Value>, at: &str, ends: &[String]) -> Result<Hir> {
        if object.get("max_tokens").is_some_and(|m| !m.is_null()) {
            return Err(unsupported(
                "max_tokens",
                at,
                "a budget of tokens (guided's languages are over text; max_chars bounds text)"
                    .into(),
            ));
        }
        let mut words = optional_strings(object, "excludes", at)?;
        words.extend_from_slice(ends);
        let text = text_without(&words);
        Ok(match object.get("max_chars") {
            None | Some(Value::Null) => text,
            Some(n) => {
                let n = n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| malformed(&format!("{at}/max_chars"), "must be a count"))?;
                Hir::intersection([text, Hir::repeat(Hir::any_char(), 0, Some(n))])
            }
        })
    }
}

/// Free text interrupted by calls: see the module's description.
fn dispatch(
    triggers: &[String],
    calls: Vec<Call>,
    excludes: &[String],
    ends: &[String],
    repetition: Repetition,
) -> Hir {
    let mut banned: Vec<String> = triggers.to_vec();
    banned.extend_from_slice(excludes);
    banned.extend_from_slice(ends);
    let free = Hir::shared(text_without(&banned));
    // Calls grouped by the trigger beginnings their own begin would complete, so that the usual
    // case (no trigger overlaps a begin) shares one free text before every call.
    let mut groups: Vec<(BTreeSet<String>, Vec<Hir>)> = Vec::new();
    let mut any_call = Vec::with_capacity(calls.len());
    for call in calls {
        let straddling = straddling_prefixes(triggers, &call.begin);
        match groups.iter_mut().find(|(s, _)| *s == straddling) {
            Some((_, members)) => members.push(call.hir.clone()),
            None => groups.push((straddling, vec![call.hir.clone()])),
        }
        any_call.push(call.hir);
    }
    let text_then_call = Hir::alternation(groups.into_iter().map(|(straddling, members)| {
        let before = if straddling.is_empty() {
            free.clone()
        } else {
            let ending = Hir::concat([
                Hir::repeat(Hir::any_char(), 0, None),
                Hir::alternation(straddling.iter().map(|p| Hir::literal(p))),
            ]);
            Hir::intersection([free.clone(), Hir::complement(ending)])
        };
        Hir::concat([before, Hir::alternation(members)])
    }));
    let call = Hir::alternation(any_call);
    match (repetition.at_least_one, repetition.stop_after_first) {
        (false, false) => Hir::concat([Hir::repeat(text_then_call, 0, None), free]),
        (true, false) => Hir::concat([call, Hir::repeat(text_then_call, 0, None), free]),
        (false, true) => Hir::alternation([text_then_call, free]),
        (true, true) => call,
    }
}

/// The proper prefixes of triggers that `begin` completes: text ending in one of them, followed
/// by `begin`, holds a trigger that starts before `begin` does.
fn straddling_prefixes(triggers: &[String], begin: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in triggers {
        for (k, _) in t.char_indices().skip(1) {
            if begin.starts_with(&t[k..]) {
                out.insert(t[..k].to_string());
            }
        }
    }
    out
}

/// Text (valid UTF-8) that contains none of `words` (empty words are ignored).
fn text_without(words: &[String]) -> Hir {
    let any = || Hir::repeat(Hir::class(ClassSet::full()), 0, None);
    let words: BTreeSet<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return any();
    }
    Hir::complement(Hir::concat([
        any(),
        Hir::alternation(words.into_iter().map(Hir::literal)),
        any(),
    ]))
}

fn repeat_bounds(object: &Map<String, Value>, at: &str) -> Result<(u32, Option<u32>)> {
    let count = |name: &str| -> Result<i64> {
        field(object, name, at)?
            .as_i64()
            .ok_or_else(|| malformed(&format!("{at}/{name}"), "must be an integer"))
    };
    let (min, max) = (count("min")?, count("max")?);
    let min = u32::try_from(min).map_err(|_| malformed(&format!("{at}/min"), "must be a count"))?;
    let max = match max {
        -1 => None,
        m => Some(
            u32::try_from(m)
                .ok()
                .filter(|&m| m >= min)
                .ok_or_else(|| malformed(&format!("{at}/max"), "must be -1 or a count ≥ min"))?,
        ),
    };
    Ok((min, max))
}

fn as_object<'v>(value: &'v Value, at: &str) -> Result<&'v Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| malformed(at, "must be a JSON object"))
}

fn field<'v>(object: &'v Map<String, Value>, name: &str, at: &str) -> Result<&'v Value> {
    object
        .get(name)
        .ok_or_else(|| malformed(at, &format!("needs a {name:?} field")))
}

fn string(object: &Map<String, Value>, name: &str, at: &str) -> Result<String> {
    field(object, name, at)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| malformed(&format!("{at}/{name}"), "must be a string"))
}

fn strings(object: &Map<String, Value>, name: &str, at: &str) -> Result<Vec<String>> {
    let list = field(object, name, at)?
        .as_array()
        .ok_or_else(|| malformed(&format!("{at}/{name}"), "must be an array of strings"))?;
    list.iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| malformed(&format!("{at}/{name}"), "must be an array of strings"))
        })
        .collect()
}

fn optional_strings(object: &Map<String, Value>, name: &str, at: &str) -> Result<Vec<String>> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(_) => strings(object, name, at),
    }
}

fn malformed(at: &str, why: &str) -> Error {
    let at = if at.is_empty() { "the top level" } else { at };
    Error::Invalid(format!("structural tag at {at:?}: {why}"))
}

fn unsupported(keyword: &str, at: &str, what: String) -> Error {
    Error::UnsupportedSchema {
        keyword: keyword.to_string(),
        pointer: at.to_string(),
        message: format!("{what} cannot be enforced"),
    }
}

#[cfg(test)]
mod tests;
