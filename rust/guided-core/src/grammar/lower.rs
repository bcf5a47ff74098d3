//! From rules to one expression: regular rules inlined, recursive rules kept as calls.
//!
//! The steps, each linear in the grammar: name the rules and check every reference; rewrite
//! direct left recursion (`a ::= a x | y` is `y x*`); keep the rules the root reaches; find the
//! strongly connected components of the reference graph (Tarjan's algorithm, iterative, so a
//! chain of a hundred thousand rules is no deeper on the stack than one); decide which rules can
//! be empty and which derive any text at all (fixpoints over the rules); refuse left recursion
//! that is left (a cycle of calls that read nothing first); then lower the rules in the order the
//! components come out, sinks first, so that every regular rule is built, once, before the rules
//! that use it, and a reference to it is a [`Hir::shared`] copy of the same node.
//!
//! Calls carry whether their rule is nullable, which the NFA layer needs and cannot compute
//! without recursing; the fixpoint here gives it.

use rustc_hash::FxHashMap;

use super::ast::{Expr, Pos, Rule};
use crate::error::{Error, Result};
use crate::regex::Hir;

/// Most regular rules nested inside one another once inlined: the expression is as deep as the
/// chain, and expressions are walked recursively.
pub const MAX_INLINE_DEPTH: usize = 256;

/// The language of rule `root`: a [`Hir::Grammar`] whose rules are the recursive rules, or a
/// plain expression when no rule the root reaches is recursive.
pub fn lower(rules: &[Rule], root: &str) -> Result<Hir> {
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, rule) in rules.iter().enumerate() {
        if let Some(&first) = index.get(rule.name.as_str()) {
            let at = rules[first].at;
            return Err(error(
                rule.at,
                format!(
                    "rule `{}` is defined twice (first at line {}, column {})",
                    rule.name, at.line, at.column
                ),
            ));
        }
        index.insert(&rule.name, i);
    }
    let Some(&root_index) = index.get(root) else {
        return Err(error(
            Pos { line: 1, column: 1 },
            format!("the grammar has no rule named `{root}`"),
        ));
    };
    let mut bodies = rules
        .iter()
        .map(without_direct_left_recursion)
        .collect::<Result<Vec<_>>>()?;
    let mut edges: Vec<Vec<usize>> = Vec::with_capacity(rules.len());
    for body in &bodies {
        let mut out = Vec::new();
        let mut undefined = None;
        body.for_each_ref(&mut |name, at| match index.get(name) {
            Some(&j) => out.push(j),
            None => {
                undefined.get_or_insert((name.to_string(), at));
            }
        });
        if let Some((name, at)) = undefined {
            return Err(error(at, format!("undefined rule `{name}`")));
        }
        edges.push(out);
    }
    let components = strongly_connected(&edges, root_index);
    let mut recursive = vec![false; rules.len()];
    for component in &components {
        let cyclic = component.len() > 1 || edges[component[0]].contains(&component[0]);
        for &i in component {
            recursive[i] = cyclic;
        }
    }
    let reached: Vec<usize> = components.iter().flatten().copied().collect();
    let nullable = fixpoint(&reached, &bodies, &index, |e, known| e.nullable_with(known));
    let productive = fixpoint(&reached, &bodies, &index, |e, known| {
        e.productive_with(known)
    });
    if !productive[root_index] {
        return Err(error(
            rules[root_index].at,
            format!(
                "rule `{root}` derives no text: every way through it needs a rule that never ends"
            ),
        ));
    }
    check_left_recursion(rules, &bodies, &components, &index, &recursive, &nullable)?;

    // Lower sinks first: a regular rule's references are all built before it.
    let mut slot = vec![u32::MAX; rules.len()];
    let mut next_slot = 0u32;
    for &i in &reached {
        if recursive[i] {
            slot[i] = next_slot;
            next_slot += 1;
        }
    }
    // Languages compiled apart (a JSON Schema in a Lark grammar) may be grammars of their own:
    // their rules go after the recursive rules', whose places are kept for them.
    let mut grammar_rules = vec![Hir::Empty; next_slot as usize];
    for &i in &reached {
        lift_embedded_rules(&mut bodies[i], &mut grammar_rules);
    }
    let mut built: Vec<Option<Hir>> = vec![None; rules.len()];
    let mut depth = vec![0usize; rules.len()];
    let mut recursive_bodies: Vec<(u32, Hir)> = Vec::new();
    for &i in &reached {
        let inlined = edges[i].iter().filter(|&&j| !recursive[j]);
        let d = 1 + inlined.map(|&j| depth[j]).max().unwrap_or(0);
        if d > MAX_INLINE_DEPTH {
            return Err(Error::size_limit(
                "grammar_inline_depth",
                d,
                MAX_INLINE_DEPTH,
            ));
        }
        depth[i] = d;
        let lowering = Lowering {
            index: &index,
            built: &built,
            slot: &slot,
            nullable: &nullable,
        };
        let hir = lowering.expr(&bodies[i]);
        if recursive[i] {
            recursive_bodies.push((slot[i], hir));
        } else {
            built[i] = Some(Hir::shared(hir));
        }
    }
    for (s, hir) in recursive_bodies {
        grammar_rules[s as usize] = hir;
    }
    let start = if recursive[root_index] {
        Hir::call(slot[root_index], nullable[root_index])
    } else {
        built[root_index].take().unwrap_or_else(Hir::nothing)
    };
    Ok(Hir::grammar(start, grammar_rules))
}

/// Moves the rules of the grammars embedded in `e` into `rules` (see [`Hir::lift_rules`]).
fn lift_embedded_rules(e: &mut Expr, rules: &mut Vec<Hir>) {
    match e {
        Expr::Regular(h) => {
            if matches!(h, Hir::Grammar(_)) {
                let embedded = std::mem::replace(h, Hir::Empty);
                *h = embedded.lift_rules(rules);
            }
        }
        Expr::Seq(items) | Expr::Alt(items) => {
            items.iter_mut().for_each(|x| lift_embedded_rules(x, rules))
        }
        Expr::Repeat { expr, .. } => lift_embedded_rules(expr, rules),
        Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Ref { .. } => {}
    }
}

fn error(at: Pos, message: String) -> Error {
    Error::GrammarSyntax {
        line: at.line,
        column: at.column,
        message,
    }
}

/// `a ::= a x | a y | b | c` as `(b | c) (x | y)*`: the iteration direct left recursion means.
fn without_direct_left_recursion(rule: &Rule) -> Result<Expr> {
    let branches = match &rule.body {
        Expr::Alt(branches) => branches.clone(),
        other => vec![other.clone()],
    };
    let calls_itself_first = |e: &Expr| matches!(e, Expr::Ref { name, .. } if *name == rule.name);
    let mut bases = Vec::new();
    let mut tails = Vec::new();
    for branch in branches {
        match branch {
            Expr::Seq(items) if items.first().is_some_and(calls_itself_first) => {
                tails.push(Expr::Seq(items[1..].to_vec()));
            }
            e if calls_itself_first(&e) => tails.push(Expr::Empty),
            e => bases.push(e),
        }
    }
    if tails.is_empty() {
        return Ok(rule.body.clone());
    }
    if bases.is_empty() {
        return Err(error(
            rule.at,
            format!(
                "rule `{}` is left-recursive in every branch, so it derives no text",
                rule.name
            ),
        ));
    }
    Ok(Expr::Seq(vec![
        Expr::Alt(bases),
        Expr::Repeat {
            expr: Box::new(Expr::Alt(tails)),
            min: 0,
            max: None,
        },
    ]))
}

/// The strongly connected components of the rules `root` reaches, each a list of rule indices,
/// in the order Tarjan's algorithm completes them: every component after the ones it refers to.
fn strongly_connected(edges: &[Vec<usize>], root: usize) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = edges.len();
    let mut order = vec![UNSEEN; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut counter = 0;
    // (node, next edge to look at)
    let mut work = vec![(root, 0usize)];
    order[root] = counter;
    low[root] = counter;
    counter += 1;
    stack.push(root);
    on_stack[root] = true;
    while let Some(&mut (v, ref mut next)) = work.last_mut() {
        if let Some(&w) = edges[v].get(*next) {
            *next += 1;
            if order[w] == UNSEEN {
                order[w] = counter;
                low[w] = counter;
                counter += 1;
                stack.push(w);
                on_stack[w] = true;
                work.push((w, 0));
            } else if on_stack[w] {
                low[v] = low[v].min(order[w]);
            }
            continue;
        }
        work.pop();
        if let Some(&(parent, _)) = work.last() {
            low[parent] = low[parent].min(low[v]);
        }
        if low[v] == order[v] {
            let mut component = Vec::new();
            while let Some(w) = stack.pop() {
                on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            components.push(component);
        }
    }
    components
}

/// The least fixpoint of a per-rule property over the reached rules (`step` reads the current
/// guesses of the rules an expression refers to).
fn fixpoint(
    reached: &[usize],
    bodies: &[Expr],
    index: &FxHashMap<&str, usize>,
    step: impl Fn(&Expr, &dyn Fn(&str) -> bool) -> bool,
) -> Vec<bool> {
    let mut known = vec![false; bodies.len()];
    loop {
        let mut changed = false;
        for &i in reached {
            if !known[i]
                && step(&bodies[i], &|name| {
                    index.get(name).is_some_and(|&j| known[j])
                })
            {
                known[i] = true;
                changed = true;
            }
        }
        if !changed {
            return known;
        }
    }
}

/// Refuses a cycle of recursive rules that call one another before reading anything.
fn check_left_recursion(
    rules: &[Rule],
    bodies: &[Expr],
    components: &[Vec<usize>],
    index: &FxHashMap<&str, usize>,
    recursive: &[bool],
    nullable: &[bool],
) -> Result<()> {
    // The recursive rules each rule may call first; a regular rule's set is spliced into its
    // users, as its body will be. Components come sinks first, so those sets exist when needed.
    let mut first: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    for &i in components.iter().flatten() {
        let mut out = Vec::new();
        bodies[i].first_calls(
            &mut |name| {
                let j = index[name];
                if recursive[j] {
                    out.push(j);
                } else {
                    out.extend_from_slice(&first[j]);
                }
            },
            &|name| nullable[index[name]],
        );
        out.sort_unstable();
        out.dedup();
        first[i] = out;
    }
    for component in components.iter().filter(|c| recursive[c[0]]) {
        // A left cycle stays inside one component; look for one from each rule.
        for &start in component {
            let mut seen = vec![false; rules.len()];
            let mut todo = first[start].clone();
            while let Some(j) = todo.pop() {
                if j == start {
                    return Err(error(
                        rules[start].at,
                        format!(
                            "rule `{}` is left-recursive: it can call itself again before reading any text, which only a direct `{0} ::= {0} ...` branch can be rewritten from",
                            rules[start].name
                        ),
                    ));
                }
                if !seen[j] && component.contains(&j) {
                    seen[j] = true;
                    todo.extend_from_slice(&first[j]);
                }
            }
        }
    }
    Ok(())
}

struct Lowering<'a> {
    index: &'a FxHashMap<&'a str, usize>,
    built: &'a [Option<Hir>],
    slot: &'a [u32],
    nullable: &'a [bool],
}

impl Lowering<'_> {
    fn expr(&self, e: &Expr) -> Hir {
        match e {
            Expr::Empty => Hir::Empty,
            Expr::Literal(s) => Hir::literal(s),
            Expr::Class(set) => Hir::class(set.clone()),
            Expr::Regular(h) => h.clone(),
            Expr::Ref { name, .. } => {
                let i = self.index[name.as_str()];
                match &self.built[i] {
                    Some(h) => h.clone(),
                    None => Hir::call(self.slot[i], self.nullable[i]),
                }
            }
            Expr::Seq(items) => Hir::concat(items.iter().map(|e| self.expr(e))),
            Expr::Alt(items) => Hir::alternation(items.iter().map(|e| self.expr(e))),
            Expr::Repeat { expr, min, max } => Hir::repeat(self.expr(expr), *min, *max),
        }
    }
}

impl Expr {
    fn nullable_with(&self, rule: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Expr::Empty => true,
            Expr::Literal(_) | Expr::Class(_) => false,
            Expr::Regular(h) => h.nullable(),
            Expr::Ref { name, .. } => rule(name),
            Expr::Seq(items) => items.iter().all(|e| e.nullable_with(rule)),
            Expr::Alt(items) => items.iter().any(|e| e.nullable_with(rule)),
            Expr::Repeat { expr, min, .. } => *min == 0 || expr.nullable_with(rule),
        }
    }

    fn productive_with(&self, rule: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Expr::Empty | Expr::Literal(_) => true,
            Expr::Class(set) => !set.is_empty(),
            Expr::Regular(h) => !h.is_nothing(),
            Expr::Ref { name, .. } => rule(name),
            Expr::Seq(items) => items.iter().all(|e| e.productive_with(rule)),
            Expr::Alt(items) => items.iter().any(|e| e.productive_with(rule)),
            Expr::Repeat { expr, min, .. } => *min == 0 || expr.productive_with(rule),
        }
    }

    /// Calls `f` on each reference that may be reached before any text is read.
    fn first_calls(&self, f: &mut impl FnMut(&str), nullable: &dyn Fn(&str) -> bool) {
        match self {
            Expr::Ref { name, .. } => f(name),
            Expr::Seq(items) => {
                for item in items {
                    item.first_calls(f, nullable);
                    if !item.nullable_with(nullable) {
                        break;
                    }
                }
            }
            Expr::Alt(items) => items.iter().for_each(|e| e.first_calls(f, nullable)),
            Expr::Repeat { expr, max, .. } => {
                if *max != Some(0) {
                    expr.first_calls(f, nullable);
                }
            }
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Regular(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{compile, Syntax};

    fn gbnf(text: &str) -> Result<Hir> {
        compile(text, Syntax::Gbnf, "root")
    }

    use crate::testing::matches_lazily as matches;

    fn message(text: &str) -> String {
        match gbnf(text) {
            Err(Error::GrammarSyntax { message, .. }) => message,
            other => panic!("expected a grammar error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn regular_rules_are_inlined_and_recursive_ones_called() {
        let h =
            gbnf("root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [a-z]+")
                .unwrap();
        assert!(!h.has_calls());
        assert!(matches(&h, "hello bob") && !matches(&h, "hello"));
        let h = gbnf(
            "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [0-9] | list",
        )
        .unwrap();
        let Hir::Grammar(g) = &h else { panic!("{h:?}") };
        assert_eq!(g.rules().len(), 2);
        for (text, ok) in [
            ("[]", true),
            ("[1,[2,[]],3]", true),
            ("[[]", false),
            ("[1,]", false),
        ] {
            assert_eq!(matches(&h, text), ok, "{text}");
        }
    }

    #[test]
    fn direct_left_recursion_is_iteration() {
        let h = gbnf("root ::= root \"+\" term | root \"-\" term | term\nterm ::= [0-9]").unwrap();
        assert!(!h.has_calls());
        for (text, ok) in [("1", true), ("1+2-3", true), ("+1", false), ("1+", false)] {
            assert_eq!(matches(&h, text), ok, "{text}");
        }
    }

    #[test]
    fn refusals_name_the_rule() {
        assert!(message("root ::= a").contains("undefined rule `a`"));
        assert!(message("start ::= \"a\"").contains("no rule named `root`"));
        assert!(message("root ::= \"a\"\nroot ::= \"b\"").contains("defined twice"));
        assert!(message("root ::= a\na ::= \"(\" a \")\"").contains("derives no text"));
        assert!(message("root ::= root \"x\"").contains("every branch"));
        let m = message("root ::= a \"x\"\na ::= b \"y\" | \"z\"\nb ::= \"w\"? root");
        assert!(m.contains("left-recursive"), "{m}");
        // a rule that may be empty before the recursion hides it
        assert!(message("root ::= \"a\"? root \"b\" | \"c\"").contains("left-recursive"));
    }

    #[test]
    fn long_chains_of_rules_are_a_limit_not_a_crash() {
        let chain = |n: usize| {
            let mut text = String::from("root ::= r0\n");
            for i in 0..n {
                text.push_str(&format!("r{i} ::= \"x\" r{}\n", i + 1));
            }
            text + &format!("r{n} ::= \"y\"")
        };
        let h = gbnf(&chain(200)).unwrap();
        assert!(matches(&h, &format!("{}y", "x".repeat(200))));
        assert!(matches!(gbnf(&chain(50_000)), Err(Error::SizeLimit { .. })));
    }
}
