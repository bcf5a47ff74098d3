use super::machine::explore_step;
use super::*;
use crate::nfa::EmbeddedAutomaton;
use crate::regex::parse;

fn vocab(tokens: &[&str], eos: u32) -> Arc<Vocabulary> {
    let mut all: Vec<Option<Vec<u8>>> =
        tokens.iter().map(|t| Some(t.as_bytes().to_vec())).collect();
    all.insert(eos as usize, None);
    Arc::new(Vocabulary::new(all, vec![eos], None).expect("valid test vocabulary"))
}

fn index(pattern: &str, v: &Arc<Vocabulary>, lazy: bool) -> TokenIndex {
    let hir = parse(pattern).expect("valid pattern");
    let trie = Arc::new(TokenIndex::tries_for(v).unwrap());
    if lazy {
        TokenIndex::from_hir(&hir, Arc::clone(v), trie, &IndexConfig::default()).expect("index")
    } else {
        let dfa = Dfa::from_hir(&hir, &DfaConfig::default()).expect("dfa");
        TokenIndex::from_dfa(&dfa, Arc::clone(v), trie)
    }
}

/// Brute force: token t is allowed after prefix p iff some completion of p+t matches.
fn brute(pattern: &str, v: &Vocabulary, prefix: &str) -> Vec<u32> {
    brute_bytes(pattern, v, prefix.as_bytes())
}

fn brute_bytes(pattern: &str, v: &Vocabulary, prefix: &[u8]) -> Vec<u32> {
    let dfa = Dfa::from_hir(&parse(pattern).unwrap(), &DfaConfig::default()).unwrap();
    let s = prefix
        .iter()
        .fold(dfa.start(), |s, &b| dfa.next_state(s, b));
    brute_at(&dfa, v, s)
}

/// Brute force from state `s` of a complete automaton.
fn brute_at(dfa: &Dfa, v: &Vocabulary, s: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for id in 0..v.len() as u32 {
        if v.is_eos(id) {
            if dfa.is_accepting(s) {
                out.push(id);
            }
            continue;
        }
        let Some(bytes) = v.token_bytes(id) else {
            continue;
        };
        let mut t = s;
        for &b in bytes {
            t = dfa.next_state(t, b);
        }
        if t != 0 && !bytes.is_empty() {
            out.push(id);
        }
    }
    out
}

/// Deep expressions compile on any stack: an object with thousands of optional members is an
/// expression nested once per member (see `json_schema::objects`), and its index and printed
/// form are built on a thread with a small stack, where recursion a level per member would
/// overflow it long before the work budget ends the compilation.
#[test]
fn thousands_of_optional_members_compile_on_a_small_stack() {
    let properties: serde_json::Map<String, serde_json::Value> = (0..5_000)
        .map(|i| (format!("p{i}"), serde_json::json!({"type": "integer"})))
        .collect();
    let schema = serde_json::json!({"type": "object", "properties": properties});
    let small = std::thread::Builder::new().stack_size(256 * 1024);
    let worker = small.spawn(move || {
        let bytes: Vec<String> = (b' '..=b'~').map(|b| (b as char).to_string()).collect();
        let v = vocab(&bytes.iter().map(String::as_str).collect::<Vec<_>>(), 0);
        let tries = Arc::new(TokenIndex::tries_for(&v).unwrap());
        let opts = SchemaOptions::default();
        let config = IndexConfig::default();
        let (index, _) = TokenIndex::from_json_schema(&schema, &opts, v, tries, &config)
            .expect("5,000 optional members are within the budgets");
        let mut state = index.initial_state();
        for &b in br#"{"p4999":1}"# {
            state = index.next_state(state, i64::from(b - b' ' + 1)).unwrap();
        }
        let end = index.next_state(state, 0).unwrap();
        let printed = json_schema::json_schema_to_regex(&schema, &opts).map(|(r, _)| r.len());
        (end, printed)
    });
    let (end, printed) = worker.unwrap().join().expect("no stack overflow");
    assert_eq!(end, TERMINAL);
    // The printed form may be past its node budget, but says so.
    assert!(
        matches!(printed, Ok(_) | Err(Error::SizeLimit { .. })),
        "{printed:?}"
    );
}

#[test]
fn threads_growing_one_index_agree_with_one_thread() {
    // Walks that meet rows other threads have not built yet take the exclusive lock part
    // of the way through and go on from there; every mask along every path must still be
    // the one a single thread finds on an index of its own.
    let words = class_words();
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let pattern = r"[a-z_]{1,12}(?:[.@-][a-z0-9]{1,9}){0,4}|[0-9]{1,20}|\(+[a-z]*\)*";
    let masks_along = |idx: &TokenIndex, path: &[i64]| {
        let mut state = idx.initial_state();
        let mut masks = vec![idx.mask(state).unwrap().ids()];
        for &t in path {
            state = idx.next_state(state, t).unwrap();
            masks.push(idx.mask(state).unwrap().ids());
        }
        masks
    };
    let reference = index(pattern, &v, true);
    let mut paths: Vec<Vec<i64>> = Vec::new();
    let start = reference.initial_state();
    for t in reference.mask(start).unwrap().ids() {
        let one = reference.next_state(start, i64::from(t)).unwrap();
        for u in reference.mask(one).unwrap().ids() {
            if !v.is_eos(t) && !v.is_eos(u) {
                paths.push(vec![i64::from(t), i64::from(u)]);
            }
        }
    }
    assert!(paths.len() > 100, "{} paths", paths.len());
    let expected: Vec<_> = paths.iter().map(|p| masks_along(&reference, p)).collect();
    let shared = index(pattern, &v, true);
    std::thread::scope(|scope| {
        for k in 0..4 {
            let (paths, expected, shared) = (&paths, &expected, &shared);
            scope.spawn(move || {
                // Each thread takes the paths in its own order, so that they race.
                let n = paths.len();
                for i in (0..n).map(|i| (i * (2 * k + 1) + k * n / 4) % n) {
                    let found = masks_along(shared, &paths[i]);
                    assert_eq!(found, expected[i], "path {:?}", paths[i]);
                }
            });
        }
    });
}

#[test]
fn masks_equal_brute_force_lazy_and_complete() {
    let v = vocab(&["a", "b", "ab", "ba", "1", "12", "x", "aa", "b1"], 9);
    for pattern in ["(ab)+1?", "a*b*[0-9]{0,2}", "x|ab1"] {
        for lazy in [false, true] {
            let idx = index(pattern, &v, lazy);
            let mut state = idx.initial_state();
            for prefix in ["", "a", "ab"] {
                if !prefix.is_empty() {
                    state = idx
                        .next_state(idx.initial_state(), v_id(&v, prefix))
                        .unwrap();
                    if state == DEAD {
                        continue;
                    }
                }
                let got: Vec<u32> = idx.mask(state).unwrap().ids();
                assert_eq!(
                    got,
                    brute(pattern, &v, prefix),
                    "{pattern} after {prefix:?} lazy={lazy}"
                );
            }
        }
    }
}

#[test]
fn counted_character_runs_equal_brute_force() {
    // Tokens of every length up to past the counts below, in and out of both slices, so that
    // masks taken by length from a slice meet the walk of everything else.
    let mut words: Vec<String> = ["a", "\"", "\\", "a\"", "\\\"", "é\"", "\n", "x", "xy", "é"]
        .iter()
        .map(|w| w.to_string())
        .collect();
    // Past `DENSE_CHARS` too, where members are walked one by one.
    for n in (1..=9).chain([15, 16, 17, 18, 25, 40]) {
        words.push("ab".repeat(n)[..n].to_string());
        words.push("é".repeat(n));
    }
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let eos = tokens.len() as u32;
    let v = vocab(&tokens, eos);
    let patterns = [
        r#""[^"\\]{0,5}""#,
        r#""(?:[^"\\]|\\.){2,4}"x"#,
        r".{2,7}",
        r#"[^"]{3}xy|a.{0,2}"#,
        r"(?:ab|é){0,3}a*",
        r".{0,4}(?:\n.{0,3})?",
        r"[aé]{0,12}",
        r#""[^"\\]{0,19}""#,
        r".{16,17}x|.{30,41}",
        r"(?:a|b|é){0,60}",
    ];
    assert_patterns_equal_brute_force(&patterns, &v, 3);
}

/// The lazy index of `pattern` after the masks of every text of up to three tokens, and
/// how many states those built.
fn masked_index(pattern: &str, v: &Arc<Vocabulary>) -> (TokenIndex, u32) {
    let idx = index(pattern, v, true);
    mask_texts(&idx, v, 3);
    let states = read(&idx.machine).num_states() as u32;
    (idx, states)
}

/// Computes the mask of every state a text of up to `depth` tokens reaches.
fn mask_texts(idx: &TokenIndex, v: &Vocabulary, depth: usize) {
    let mut frontier = vec![idx.initial_state()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for state in frontier {
            for t in idx.mask(state).unwrap().ids() {
                if !v.is_eos(t) {
                    next.push(idx.next_state(state, i64::from(t)).unwrap());
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        frontier = next;
    }
}

/// The states of a counted repetition read their slice moves off the copy before them
/// (`shifted_move`) where the copies around them move on alike: each move read off equals
/// the move followed from scratch, on both sides of a minimum count, towards the last copies,
/// in looping repetitions, through escapes and multi-byte characters; and the repetitions
/// that the text can enter again after a character (where the sets mix copies) must not
/// confuse it.
#[test]
fn moves_read_off_the_copy_before_equal_explored_moves() {
    let mut words: Vec<String> = [
        "a", "b", "c", "x", "y", ";", "\"", "\\", "\\n", "\\u00e9", "é", "中", "😀", "a\"", "ab",
        "\n",
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    for n in [3, 5, 8, 13, 17] {
        words.push("ab".repeat(n)[..n].to_string());
        words.push("é".repeat(n));
    }
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let patterns = [
        r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){3,40}""#,
        r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,20}",?"#,
        r".{0,50}",
        r"[a-zé中😀]{20,}",
        r"(?:ab|c|é){18,30}x",
        r"(?:a?){0,30}b",
        r"(?:[a-z]{0,20}[a-z])*",
        r"(?:[a-zé]{0,24};)*",
        r"(?:[a-c]{2,18}y){1,20}",
    ];
    let mut read_off = 0;
    for pattern in patterns {
        // Masks along every text of up to three tokens follow the chains there.
        let (idx, states) = masked_index(pattern, &v);
        for slice in 0..idx.tries.slices().len() {
            // A mask decides the move of a state whose row tells it at once and keeps no
            // record of it (`move_at_once`): record every state's move, so that the states
            // after it may read theirs off it.
            for state in 0..states {
                idx.slice_move(slice, state).unwrap();
            }
            for state in 0..states {
                let Some(before) = idx.copy_before(state) else {
                    continue;
                };
                if let Some(shifted) = idx.shifted_move(slice, state, before).unwrap() {
                    read_off += 1;
                    let (explored, _) = idx.explored_move(slice, state).unwrap();
                    assert_eq!(shifted, explored, "{pattern}: state {state}, slice {slice}");
                }
            }
        }
    }
    assert!(
        read_off > 100,
        "only {read_off} moves were read off the copy before"
    );
    // Where the text may enter the repetition again after a character, the first copy's
    // move meets copy 0 and nothing may be read off it; without the way back, it may.
    let a = i64::from(tokens.iter().position(|&t| t == "a").unwrap() as u32);
    for (pattern, expected) in [(r"(?:.{2,30})*", false), (r".{2,30}", true)] {
        let idx = index(pattern, &v, true);
        let first = idx.next_state(idx.initial_state(), a).unwrap();
        for slice in 0..idx.tries.slices().len() {
            let (_, flags) = idx.explored_move(slice, first).unwrap();
            assert_eq!(flags.shiftable, expected, "{pattern}, slice {slice}");
        }
    }
}

/// A trie of leaving tokens served by a walk remembered fewer copies back along a counted
/// string keeps the tokens its own walk keeps: checked for every state and trie served so
/// after masks along texts of up to three tokens, on both sides of a minimum count, towards
/// the end, through escapes and multi-byte characters, and where the text may enter the
/// repetition again; and the masks equal a brute-force check of every token.
#[test]
fn remembered_leaving_walks_equal_fresh_walks() {
    let mut words: Vec<String> = [
        "a", "b", "x", "\"", "\",", "\"}", "\\", "\\n", "\\u00e9", "\\u00", "é", "中", "a\"",
        "ab\"", "a\\n", "\\na", "\\nab\"", "é\"", ",", "}", "\n",
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    for n in [3, 5, 8, 13] {
        let run = "ab".repeat(n)[..n].to_string();
        words.push(format!("{run}\""));
        words.push(format!("{run}\\t"));
        words.push(format!("{run}\\nab"));
        words.push(run);
    }
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let patterns = [
        r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,30}"(?:,|\})"#,
        r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){6,24}""#,
        r#"(?:[^"\\]|\\n){2,40}"b?"#,
        r#"(?:"(?:[^"\\]|\\n){0,20}",)*"#,
        r#".{0,40}"x"#,
    ];
    let mut served = 0;
    for pattern in patterns {
        let (idx, states) = masked_index(pattern, &v);
        for state in 1..states {
            let fit = idx.slice_fit(state).unwrap();
            let Some(Shortcut::Slice { slice, chain, .. }) = &fit else {
                continue;
            };
            let mut remembered = MaskBuilder::new(v.vocab_size());
            let plan = idx.leaving_plan(fit.as_ref());
            idx.add_known(&plan, &mut remembered);
            let mut walked = MaskBuilder::new(v.vocab_size());
            let mut m = write(&idx.machine);
            let mut failure = None;
            let mut step = |s: u32, b: u8| explore_step(&mut m, &mut failure, s, b);
            for (part, _) in plan
                .iter()
                .enumerate()
                .filter(|(_, p)| matches!(p, PartPlan::Known(_)))
            {
                served += 1;
                idx.walk_leaving(*slice, chain, part, &mut step, &mut walked, &mut |_, _| {});
            }
            assert!(failure.is_none());
            let (remembered, walked) = (remembered.finish().ids(), walked.finish().ids());
            assert_eq!(remembered, walked, "{pattern}: state {state}");
        }
    }
    assert!(
        served > 100,
        "only {served} tries were served by remembered walks"
    );
    assert_patterns_equal_brute_force(&patterns, &v, 3);
}

/// Tokens that end part-way through a character count it among a slice's characters when
/// every completion of it is in the slice (`0xC3`, `0xE4 0xB8`), and are walked otherwise
/// (`0xC2` may become a control, `0xE2 0x80` a line separator): in counted runs, at the end
/// of a run where only a character outside the slice leads on, and in JSON strings.
#[test]
fn cut_characters_in_counted_runs_equal_brute_force() {
    let mut tokens: Vec<Vec<u8>> = ["a", "b", "ab", "\"", "x", "é", "中", "\u{85}", "\u{2028}"]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
    let cut: [&[u8]; 13] = [
        &[0xC3],
        &[0xC2],
        b"a\xE4",
        &[0xE4, 0xB8],
        b"ab\xE4\xB8",
        &[0xE2],
        &[0xE2, 0x80],
        &[0xE2, 0x82],
        &[0xED],
        &[0xF0, 0x9F],
        b"ab\xF0",
        &[0xF4, 0x8F, 0xBF],
        b"\"\xC3",
    ];
    tokens.extend(cut.iter().map(|t| t.to_vec()));
    let eos = tokens.len() as u32;
    let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
    all.push(None);
    let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
    let patterns = [
        r#""[^"\\]{0,3}""#,
        r#""(?:[^"\\]|\\.){1,4}""#,
        r".{0,3}",
        r"[a-z]{0,2}(?:\x85|\u2028)",
        r"[a-zé中]{0,3}\u2028?",
        r"(?:.|\x85){2,4}",
    ];
    assert_patterns_equal_brute_force(&patterns, &v, 4);
}

/// A state whose live bytes start few tokens (a count of digits, over a vocabulary that has
/// no longer numbers) is walked without a search for a class slice: no slice is built, and
/// the masks equal brute force. The same index searching at every state builds one.
#[test]
fn short_walks_take_no_class_slice() {
    let mut words: Vec<String> = (0..10).map(|d| d.to_string()).collect();
    words.extend(["a", "ab", "x", "é", "\"", " ", " a"].map(String::from));
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let pattern = "[0-9]{1,12}x?";
    for (nodes, builds) in [(SHORT_WALK, false), (0, true)] {
        let mut idx = index(pattern, &v, true);
        idx.short_walk = ShortWalk {
            nodes,
            steps: (0, 0),
        };
        let before = idx.tries.memory_bytes();
        let mut state = idx.initial_state();
        let mut text = String::new();
        for digit in "31415926535".chars() {
            assert_eq!(idx.mask(state).unwrap().ids(), brute(pattern, &v, &text));
            state = idx.next_state(state, v_id(&v, &digit.to_string())).unwrap();
            text.push(digit);
        }
        assert_eq!(
            idx.tries.memory_bytes() > before,
            builds,
            "short walks {nodes}"
        );
    }
}

/// At the start of a number, `-` heads many tokens that die at their second byte: counted
/// two levels deep, the walk is short, and no class slice is searched for or built (with
/// zero bounds, one is); every mask equals brute force either way.
#[test]
fn walks_short_two_levels_deep_take_no_class_slice() {
    let mut words: Vec<String> = (0..10).map(|d| d.to_string()).collect();
    words.extend((b'a'..=b'z').map(|c| format!("-{}", c as char)));
    words.extend(["-", "--", "->", "-1", "x", " ", "\"", ","].map(String::from));
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let pattern = "-?[0-9]{1,6}(,-?[0-9]{1,6})*";
    for (steps, builds) in [(SHORT_WALK_STEPS, false), ((0, 0), true)] {
        let mut idx = index(pattern, &v, true);
        idx.short_walk = ShortWalk { nodes: 0, steps };
        let before = idx.tries.memory_bytes();
        let mut state = idx.initial_state();
        let mut text = String::new();
        for token in ["-1", "2", "3", ",", "-", "4", "5", ",", "6"] {
            assert_eq!(idx.mask(state).unwrap().ids(), brute(pattern, &v, &text));
            state = idx.next_state(state, v_id(&v, token)).unwrap();
            text.push_str(token);
        }
        assert_eq!(
            idx.tries.memory_bytes() > before,
            builds,
            "short walks of {steps:?} steps"
        );
    }
}

/// Inside a counted string, a mask reads its count's chain without the count's own row and a
/// step follows a word's characters along the chain (moves read off the copy before), so
/// masks and steps along a text of words build no row past the string's first counts; and
/// every step from each count, of every token (words, escapes, cut and multi-byte
/// characters, tokens that close the string or die in it), equals the complete automaton's,
/// as does the mask where it leads.
#[test]
fn words_inside_a_counted_string_build_no_rows() {
    let mut tokens: Vec<Vec<u8>> = [
        "\"", "a", "ab", "abc", "b c", " a", "é", "中文", "a\"", "\"", "\"}", "\\n", "a\\n",
        "\\u00", "\\u00e9", "\\", "\n", "a\nb", "x",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect();
    tokens.extend([vec![0xC3], b"a\xE4\xB8".to_vec()]);
    let eos = tokens.len() as u32;
    let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
    all.push(None);
    let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
    let pattern = r#""(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,60}"\}"#;
    let text = [
        "\"", "abc", "ab", "b c", "é", "abc", "a", "中文", "ab", "abc", "b c", "ab",
    ];
    let rows = |idx: &TokenIndex| read(&idx.machine).explored.iter().filter(|&&e| e).count();
    let idx = index(pattern, &v, true);
    let mut state = idx.initial_state();
    let mut built = Vec::new();
    for word in text {
        idx.mask(state).unwrap();
        state = idx.next_state(state, v_id(&v, word)).unwrap();
        built.push(rows(&idx));
    }
    assert!(
        built[4..].iter().all(|&n| n == built[4]),
        "rows built along the words: {built:?}"
    );
    // Every step from each count, against the complete automaton.
    let idx = index(pattern, &v, true);
    let dfa = Dfa::from_hir(&parse(pattern).unwrap(), &DfaConfig::default()).unwrap();
    let (mut state, mut at) = (idx.initial_state(), dfa.start());
    for word in text {
        idx.mask(state).unwrap();
        for id in (0..v.len() as u32).filter(|&id| !v.is_eos(id)) {
            let bytes = v.token_bytes(id).unwrap();
            let to = bytes.iter().fold(at, |s, &b| dfa.next_state(s, b));
            let next = idx.next_state(state, i64::from(id)).unwrap();
            let shown = String::from_utf8_lossy(bytes);
            assert_eq!(next == DEAD, to == 0, "{shown:?} after {word:?}");
            if next != DEAD {
                let mask = idx.mask(next).unwrap().ids();
                assert_eq!(mask, brute_at(&dfa, &v, to), "{shown:?} after {word:?}");
            }
        }
        state = idx.next_state(state, v_id(&v, word)).unwrap();
        at = word.bytes().fold(at, |s, b| dfa.next_state(s, b));
    }
}

/// Inside a long counted string, where every member fits and remembered walks serve the
/// leaving tokens, a count's mask is found by its recipe, that of a count before: masks
/// along texts equal brute force on both sides of a minimum count, through escapes and
/// multi-byte characters, where the string may end and where it must go on, up to its
/// end; and recipes served most of them.
#[test]
fn masks_found_by_recipe_equal_brute_force() {
    let words = [
        "\"", "a", "ab", "abc", "b c", " a", "é", "中文", "a\"", "\"}", "\\n", "a\\n", "\\u00e9",
        "\\", "x",
    ];
    let v = vocab(&words, words.len() as u32);
    let patterns = [
        r#""(?:[^"\\]|\\n|\\u[0-9a-f]{4}){0,90}"\}"#,
        r#""(?:[^"\\]|\\n|\\u[0-9a-f]{4}){30,60}""#,
        r#"(?:[^"\\]|\\n|\\u[0-9a-f]{4}){25,90}"#,
    ];
    let text = [
        "\"", "abc", "ab", "b c", "é", "a\\n", "abc", "中文", "\\u00e9", "ab", " a",
    ];
    let mut reused = 0;
    for pattern in patterns {
        let idx = index(pattern, &v, true);
        let (mut state, mut prefix) = (idx.initial_state(), Vec::new());
        for k in 0..40 {
            assert_eq!(
                idx.mask(state).unwrap().ids(),
                brute_bytes(pattern, &v, &prefix),
                "{pattern} after {:?}",
                String::from_utf8_lossy(&prefix)
            );
            // The opening quote first where the pattern has one, then the words in turn.
            let quoted = pattern.starts_with('"');
            let word = match k {
                0 if quoted => text[0],
                _ => text[1 + k % (text.len() - 1)],
            };
            state = idx.next_state(state, v_id(&v, word)).unwrap();
            prefix.extend_from_slice(word.as_bytes());
            if state == DEAD {
                break;
            }
        }
        // Each recipe's mask was built once, by the first state of that recipe.
        let masks = read(&idx.masks);
        let ids: rustc_hash::FxHashSet<u32> = masks.by_recipe.values().copied().collect();
        let served = masks.of_state.iter().filter(|id| ids.contains(id)).count();
        reused += served - masks.by_recipe.len();
    }
    assert!(reused > 20, "only {reused} masks were found by recipe");
}

/// The string character of llama.cpp's JSON grammars leaves out DEL, which the JSON string
/// slice holds: inside such a string the slice without DEL fits (not a class slice, whose
/// walk steps through every token that leaves it), and the masks equal brute force, DEL,
/// C1 controls and cut characters included, in a free string and a counted one.
#[test]
fn strings_without_del_take_their_own_slice() {
    let mut tokens: Vec<Vec<u8>> = [
        "a", "ab", "\"", "a\"", "\\", "\\n", "\u{7F}", "a\u{7F}b", "\u{85}", "é", "\n", "\"\n",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect();
    tokens.extend([vec![0xC3], vec![0xC2], b"a\xE4\xB8".to_vec()]);
    let eos = tokens.len() as u32;
    let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
    all.push(None);
    let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
    let patterns = [
        r#""(?:[^"\\\x7F\x00-\x1F]|\\["\\/bfnrt])*""#,
        r#""[^"\\\x7F\x00-\x1F]{0,3}""#,
    ];
    for pattern in patterns {
        for lazy in [false, true] {
            let idx = index(pattern, &v, lazy);
            let body = idx.next_state(idx.initial_state(), 2).unwrap();
            let fit = idx.slice_fit(body).unwrap();
            let Some(Shortcut::Slice { slice, .. }) = fit else {
                panic!("{pattern}: no fixed slice inside the string: {fit:?}");
            };
            assert_eq!(idx.tries.slices()[slice].name(), "json_string_no_del");
            assert_masks_equal_brute_force(&idx, pattern, &v, 3);
        }
    }
}

/// How far a state's chain reaches is kept for the states after it (`slice_reach`): masks
/// asked from the end of a counted run back to its start, so that each chain stops at a
/// state whose reach is known, equal those asked in order and brute force. The runs are
/// longer than the longest member (the chain is cut there, and followed on for the tokens
/// that leave the slice later), part ways past `DENSE_CHARS` characters (the longer members
/// are walked), or loop.
#[test]
fn chains_followed_from_known_reaches_equal_brute_force() {
    let mut words: Vec<String> = ["a", "b", "\"", "é", "\n", "ab", "x"]
        .iter()
        .map(|w| w.to_string())
        .collect();
    for n in [3, 7, 15, 16, 17, 18, 19, 21, 30] {
        words.push("ab".repeat(n)[..n].to_string());
    }
    // Tokens that leave the slice after a run of its characters, some after more of them
    // than the longest member spells: past the cut, the chain is followed on for them.
    for n in [2, 9, 29, 33, 45] {
        let run = "ab".repeat(n)[..n].to_string();
        words.push(format!("{run}\""));
        words.push(format!("{run}\nx"));
    }
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let id = |text: &str| tokens.iter().position(|&t| t == text).unwrap() as i64;
    let (a, quote) = (id("a"), id("\""));
    let patterns = [
        r#""[^"\\]{0,50}""#,
        r".{20}a.{0,45}",
        r"(?:[ab]|é){3,40}x?",
        r"a{0,35}(?:b.*)?",
    ];
    for pattern in patterns {
        for lazy in [false, true] {
            let idx = index(pattern, &v, lazy);
            // Into the string first, then `a` after `a`.
            let open = pattern.starts_with('"').then_some((quote, "\""));
            let steps = open.into_iter().chain(std::iter::repeat_n((a, "a"), 44));
            let mut states = vec![(idx.initial_state(), String::new())];
            for (token, piece) in steps {
                let (last, text) = &states[states.len() - 1];
                let next = idx.next_state(*last, token).unwrap();
                if next == DEAD {
                    break;
                }
                let text = format!("{text}{piece}");
                states.push((next, text));
            }
            assert!(states.len() > 30, "{pattern}: {} states", states.len());
            for (state, text) in states.iter().rev() {
                assert_eq!(
                    idx.mask(*state).unwrap().ids(),
                    brute(pattern, &v, text),
                    "{pattern} after {text:?}"
                );
            }
        }
    }
}

/// [`assert_masks_equal_brute_force`] for each pattern, built lazily and in full.
fn assert_patterns_equal_brute_force(patterns: &[&str], v: &Arc<Vocabulary>, depth: usize) {
    for pattern in patterns {
        for lazy in [false, true] {
            assert_masks_equal_brute_force(&index(pattern, v, lazy), pattern, v, depth);
        }
    }
}

/// Compares the mask of every state a sequence of up to `depth` tokens reaches with
/// [`brute_bytes`] after the same text.
fn assert_masks_equal_brute_force(idx: &TokenIndex, pattern: &str, v: &Vocabulary, depth: usize) {
    let mut frontier = vec![(idx.initial_state(), Vec::new())];
    for _ in 0..depth {
        let mut next = Vec::new();
        for (state, prefix) in frontier {
            let got = idx.mask(state).unwrap().ids();
            assert_eq!(
                got,
                brute_bytes(pattern, v, &prefix),
                "{pattern} after {:?}",
                String::from_utf8_lossy(&prefix)
            );
            for &t in got.iter().filter(|&&t| !v.is_eos(t)) {
                let mut longer = prefix.clone();
                longer.extend_from_slice(v.token_bytes(t).unwrap());
                next.push((idx.next_state(state, i64::from(t)).unwrap(), longer));
            }
        }
        next.sort();
        next.dedup_by_key(|(state, _)| *state);
        frontier = next;
    }
}

/// Words for the class-slice tests: pieces of identifiers, numbers and e-mail addresses, with
/// and without a leading space (half of them, so that the space is an anchor), pure and
/// mixed, some past [`DENSE_CHARS`].
fn class_words() -> Vec<String> {
    let mut words: Vec<String> = [
        "a", "b", "z", "ab", "ba", "abz", "in", "int", "if", "i", "x1", "_", "a_b", "0", "1", "10",
        "01", "2024", "-", ".", "@", "a.", "a@", "b-", "1a", "a1", "ab.c", "x@y", "@a", "((", "(",
        ")", ";", "=", " ", "  ", "\n", "é", "aé",
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    for n in [15, 16, 17, 20] {
        words.push("ab".repeat(n)[..n].to_string());
        words.push("7".repeat(n));
    }
    let spaced: Vec<String> = words.iter().map(|w| format!(" {w}")).collect();
    words.extend(spaced);
    words
}

/// Inside a domain name's label, `.` and `-` leave the letters' class into states that read
/// letters alike again. With over [`BIG_HEAD_NODES`](crate::slice::BIG_HEAD_NODES) nodes
/// below each, the walk takes a class slice below them ([`TokenIndex::head_parts`]), and the
/// runs' exits along their chains; masks equal brute force at every count of a label.
#[test]
fn domain_labels_equal_brute_force() {
    let letters = "abcdefghijklmnopqrstuvwxyz0123456789";
    let pairs: Vec<String> = letters
        .chars()
        .flat_map(|a| letters.chars().map(move |b| format!("{a}{b}")))
        .collect();
    let mut words: Vec<String> = letters.chars().map(String::from).collect();
    for end in ["", "x", "y"] {
        words.extend(pairs.iter().map(|p| format!("{p}{end}")));
    }
    // Over a thousand nodes below `.` and `-` each, but too few tokens for an anchor (one
    // token in eight).
    for lead in ['.', '-'] {
        words.extend(pairs[..550].iter().map(|p| format!("{lead}{p}q")));
        words.extend(pairs[..20].iter().map(|p| format!("{lead}{p}")));
    }
    let run = "ab".repeat(10);
    for end in ["", ".c", "-", "-d.e", "@"] {
        words.push(format!("{}{end}", &run[..19]));
        words.push(format!("{}{end}", &run[..7]));
    }
    for w in [
        "a-b", "ab.c", "abc.", "x-", "x--y", ".", "-", "..", ".-", "-.", "a.b.c", "@", "q@", "é",
        "a b", ".0", ".7", ".12", ".345",
    ] {
        words.push(w.to_string());
    }
    words.sort();
    words.dedup();
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let v = vocab(&tokens, tokens.len() as u32);
    let tries = TokenIndex::tries_for(&v).unwrap();
    let big: Vec<u8> = tries.heads().iter().map(|h| h.path[0]).collect();
    assert!(big.contains(&b'.') && big.contains(&b'-'), "{big:?}");
    let label = |n: usize| format!("[a-z0-9](?:[a-z0-9-]{{0,{n}}}[a-z0-9])?");
    let patterns = [
        format!(r"{}(?:\.{})*", label(61), label(61)),
        format!(r"{}(?:\.{}){{0,2}}", label(5), label(5)),
    ];
    let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
    assert_patterns_equal_brute_force(&patterns, &v, 3);
    // The shortcut was taken: two letters in, the `.` and `-` heads have class slices of
    // their own, and the letters' runs a chain.
    let id = |text: &str| tokens.iter().position(|&t| t == text).unwrap() as i64;
    let after_ab = |pattern: &str| {
        let idx = index(pattern, &v, true);
        let state = idx.next_state(idx.initial_state(), id("ab")).unwrap();
        let shape = idx.shape(state, false).unwrap();
        let Some(Shortcut::Classes {
            root: Some(root),
            heads,
            ..
        }) = &shape.fit
        else {
            panic!("no class slice after `ab`: {:?}", shape.fit);
        };
        let parts: Vec<u8> = heads.iter().map(|p| big[p.head]).collect();
        (root.chain.is_some(), parts)
    };
    let (chained, parts) = after_ab(patterns[0]);
    assert!(chained, "the letters' runs lead through one state each");
    assert_eq!(parts, vec![b'-', b'.']);
    // Where the state after `.` reads only digits, which a few tokens below `.` start with,
    // those few are walked plainly: no head part, and masks still equal brute force.
    let narrow = r"[a-z]{1,30}(?:\.[0-9]{1,9})?";
    assert_patterns_equal_brute_force(&[narrow], &v, 3);
    let (_, parts) = after_ab(narrow);
    assert!(
        parts.is_empty(),
        "a head part below `.` for the few tokens of digits"
    );
}

#[test]
fn class_runs_equal_brute_force() {
    let words = class_words();
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let eos = tokens.len() as u32;
    let v = vocab(&tokens, eos);
    let tries = TokenIndex::tries_for(&v).unwrap();
    assert!(
        tries.anchors().iter().any(|a| a.path[0] == b' '),
        "the leading space"
    );
    let patterns = [
        r"[a-z0-9._%+-]{1,6}@(?:[a-z0-9-]{1,4}\.){1,2}[a-z]{2,3}",
        r"[0-9]{1,20}",
        r"(?: [a-z_][a-z0-9_]*)+",
        r"(?:int|if|[a-z_][a-z0-9_]*)(?: (?:int|if|[a-z_][a-z0-9_]*))*",
        r"[a-z]{2,18}",
        r"(?:[0-9]+|[a-z]+)(?: [0-9]+| [a-z]+){0,3}",
        r"[a-z0-9]*1[a-z]{0,3}",
        r"(?:[ab]{1,3}[0-9]{0,2})+",
        r"[a-zé]{0,5}",
    ];
    for pattern in patterns {
        for lazy in [false, true] {
            let idx = index(pattern, &v, lazy);
            let before = idx.tries.memory_bytes();
            assert_masks_equal_brute_force(&idx, pattern, &v, 4);
            if pattern.starts_with("[a-z0-9.") {
                assert!(
                    idx.tries.memory_bytes() > before,
                    "the counted classes built class slices"
                );
            }
            // The characters past ASCII are tried (their representatives computed) only
            // by a pattern whose states live on a byte that starts one.
            assert_eq!(
                idx.wide_reps.get().is_some(),
                pattern.contains('é'),
                "{pattern}"
            );
        }
    }
}

/// A state's slice move read off its row at once (`move_at_once`: characters that part
/// ways, or all dead) is the move found by following the characters, on every slice; and
/// the shortcut answers for most of the states a literal, a keyword or a number passes
/// through, both ways.
#[test]
fn moves_known_at_once_equal_explored_moves() {
    let tokens = [
        "a", "b", "ab", "\"", "\\", "1", "12", "é", "中", " ", "x\"", "{\"", "true", "xé",
    ];
    let v = vocab(&tokens, tokens.len() as u32);
    let patterns = [
        r#"\{"city": "(?:Lisbon|Porto)", "days": [0-9]{1,3}, "ok": (?:true|false)\}"#,
        r#""(?:[^"\\]|\\["\\/bfnrt])*""#,
        r".{0,12}",
        r"[a-z]+(?:é|中)?[0-9]*",
        // After `x` only characters past ASCII live: not all dead.
        r"(?:x(?:é|中)y)+",
    ];
    let (mut mixed, mut dead, mut known, mut all) = (0, 0, 0, 0);
    for pattern in patterns {
        let (idx, states) = masked_index(pattern, &v);
        for slice in 0..idx.tries.slices().len() {
            for state in 1..states {
                let (explored, _) = idx.explored_move(slice, state).unwrap();
                let at_once = idx.move_at_once(slice, state);
                if let Some(at_once) = at_once {
                    assert_eq!(at_once, explored, "{pattern}: state {state}, slice {slice}");
                    mixed += usize::from(at_once == Advance::Mixed);
                    dead += usize::from(at_once == Advance::To(DEAD));
                }
                let short = matches!(explored, Advance::Mixed | Advance::To(DEAD));
                all += usize::from(short);
                known += usize::from(short && at_once.is_some());
            }
        }
    }
    assert!(
        known * 4 >= all * 3 && mixed >= 10 && dead >= 3,
        "{known} of {all} mixed or dead moves known at once ({mixed} mixed, {dead} dead)"
    );
}

/// Characters past ASCII join a class where they lead on alike (free text before a trigger,
/// a string body with a pattern): tokens of whole printable characters are taken by length,
/// and those that end part-way through a character, hold a control character past ASCII or
/// leave the class are walked.
#[test]
fn wide_class_runs_equal_brute_force() {
    let mut words: Vec<Vec<u8>> = [
        "a",
        "ab",
        "<",
        "a<",
        "<f",
        "f",
        "fn",
        "@",
        "a@",
        "x@y",
        "é",
        "日本",
        "日本語",
        "é<",
        "<日",
        "😀",
        "a😀b",
        "\u{85}",
        "a\u{2028}",
        "\n",
        "\"",
        " ",
        "  ",
        "=",
        ">",
    ]
    .iter()
    .map(|w| w.as_bytes().to_vec())
    .collect();
    // Tokens that end part-way through a character, as byte-level vocabularies have.
    words.extend([vec![0xC3], vec![0xE6, 0x97], vec![0xA9], b"a\xC3".to_vec()]);
    for n in [15, 16, 17, 20] {
        words.push("é".repeat(n).into_bytes());
        words.push("ab".repeat(n).as_bytes()[..n].to_vec());
    }
    let spaced: Vec<Vec<u8>> = words.iter().map(|w| [b" ", &w[..]].concat()).collect();
    words.extend(spaced);
    let eos = words.len() as u32;
    let mut all: Vec<Option<Vec<u8>>> = words.into_iter().map(Some).collect();
    all.push(None);
    let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
    let patterns = [
        r"[^<]*(?:<f[a-z]*>[^<]*)*",
        r"(?s:.*@.*)",
        r#""[^"\\@]{0,18}@[^"\\]{1,3}""#,
        r"[^\x00-\x1f<]{0,17}<?",
        r"[^<>]{2,5}>|[a-zé日本]*",
        r"(?: [^ <]+)*",
        // Past ASCII the characters lead elsewhere than the letters do.
        r"(?:[a-z<]{1,4}|[^\x00-\x7f]{1,9})=",
    ];
    assert_patterns_equal_brute_force(&patterns, &v, 3);
}

/// On a grammar (a pushdown automaton, where a class's strings part ways into keyword
/// prefixes and calls), masks with class slices equal the plain walk of every token.
#[test]
fn class_runs_on_a_grammar_equal_the_plain_walk() {
    let grammar = r#"
        root ::= stmt+
        stmt ::= ("int" ws)? ident ws? "=" ws? expr ";" | "if(" expr "){" stmt* "}"
        expr ::= term (("+" | "-") term)*
        term ::= ident | num | "(" expr ")"
        ident ::= [a-z_] [a-z0-9_]*
        num ::= [0-9]+
        ws ::= [ ]+
    "#;
    let hir = crate::grammar::compile(grammar, crate::grammar::Syntax::Gbnf, "root").unwrap();
    let words = class_words();
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    let eos = tokens.len() as u32;
    let v = vocab(&tokens, eos);
    let tries = Arc::new(TokenIndex::tries_for(&v).unwrap());
    let idx =
        TokenIndex::from_hir(&hir, Arc::clone(&v), tries, &IndexConfig::default()).expect("index");
    let mut frontier = vec![idx.initial_state()];
    let mut checked = 0;
    for _ in 0..6 {
        let mut next = Vec::new();
        for state in frontier {
            let plain = idx.next_states(state).unwrap();
            // EOS included: it leads to the terminal state where the state accepts.
            let expected: Vec<u32> = (0..plain.len() as u32)
                .filter(|&t| plain[t as usize] != DEAD)
                .collect();
            assert_eq!(idx.mask(state).unwrap().ids(), expected, "state {state}");
            checked += 1;
            next.extend(
                plain
                    .iter()
                    .copied()
                    .filter(|&s| s != DEAD && s != TERMINAL),
            );
        }
        next.sort_unstable();
        next.dedup();
        next.truncate(60);
        frontier = next;
    }
    assert!(checked > 40, "{checked} states");
}

fn v_id(v: &Vocabulary, text: &str) -> i64 {
    (0..v.len() as u32)
        .find(|&i| v.token_bytes(i) == Some(text.as_bytes()))
        .map(i64::from)
        .expect("token present")
}

#[test]
fn long_counts_of_shared_parts_are_calls_with_exact_masks() {
    // An array-like count of a shared part: the lazy construction calls the part's rule
    // from each copy instead of determinizing the repetition whole.
    let item = Hir::shared(parse("(ab|ba)+x").unwrap());
    let hir = Hir::repeat(Hir::concat([Hir::literal(","), item]), 2, Some(40));
    let nfa = Nfa::for_lazy(&hir, &NfaConfig::default(), &DfaConfig::default()).unwrap();
    assert!(
        nfa.automata().is_empty(),
        "{} automata built",
        nfa.automata().len()
    );
    assert_eq!(nfa.rules().len(), 1);

    let v = vocab(&[",", "ab", "ba", "x", ",ab", "x,", "abx"], 7);
    let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
    let idx =
        TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &IndexConfig::default()).expect("index");
    let dfa = Dfa::from_hir(&hir, &DfaConfig::default()).unwrap();
    let walk = [",ab", "x,", "ba", "x", ",", "abx", ",ab", "x"];
    let (mut state, mut s) = (idx.initial_state(), dfa.start());
    for (step, token) in walk.iter().enumerate() {
        assert_eq!(
            idx.mask(state).unwrap().ids(),
            brute_at(&dfa, &v, s),
            "after {:?}",
            &walk[..step]
        );
        state = idx.next_state(state, v_id(&v, token)).unwrap();
        s = token.bytes().fold(s, |t, b| dfa.next_state(t, b));
    }
    assert!(dfa.is_accepting(s) && idx.mask(state).unwrap().ids().contains(&7));
}

/// Every state up to three tokens deep: the lazy index's masks against a brute-force walk of
/// the complete automaton of the same expression.
fn assert_lazy_equals_complete(hir: &Hir, v: &Arc<Vocabulary>, tokens: &[&str]) {
    let trie = Arc::new(TokenIndex::tries_for(v).unwrap());
    let idx =
        TokenIndex::from_hir(hir, Arc::clone(v), trie, &IndexConfig::default()).expect("index");
    let dfa = Dfa::from_hir(hir, &DfaConfig::default()).expect("dfa");
    let mut frontier = vec![(idx.initial_state(), dfa.start(), String::new())];
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        let mut next = Vec::new();
        for (state, s, prefix) in frontier {
            if !seen.insert(state) {
                continue;
            }
            assert_eq!(
                idx.mask(state).unwrap().ids(),
                brute_at(&dfa, v, s),
                "{hir} after {prefix:?}"
            );
            for t in tokens {
                let to = idx.next_state(state, v_id(v, t)).unwrap();
                if to != DEAD {
                    let s = t.bytes().fold(s, |x, b| dfa.next_state(x, b));
                    next.push((to, s, format!("{prefix}{t}")));
                }
            }
        }
        frontier = next;
    }
}

#[test]
fn lazy_products_equal_complete_automata() {
    let tokens = ["a", "b", "ab", "ba", "é", "aé", "bb", "aaa", "\"", "b\""];
    let v = vocab(&tokens, tokens.len() as u32);
    let p = |s: &str| parse(s).unwrap();
    let cases = [
        // A bounded length against a pattern: what `maxLength` meets `format` as.
        Hir::intersection([p(".{0,5}"), p("(?:ab|é)*a?")]),
        // A negative operand: strings of `[ab]*` without `bb`.
        Hir::intersection([p("[ab]*"), Hir::complement(p(".*bb.*"))]),
        // A bare complement (beside valid UTF-8), inside a sequence.
        Hir::concat([Hir::complement(p("a*")), p("\"")]),
        // Empty intersections: nothing may be allowed, not even a first byte.
        Hir::intersection([p("a+"), p("b+")]),
        Hir::intersection([p("a.{2}"), p("a{2}")]),
        // Nested products flatten, and repeat inside a repetition.
        Hir::repeat(
            Hir::concat([
                Hir::intersection([p("[abé]{1,3}"), Hir::complement(p("a+"))]),
                p("\""),
            ]),
            0,
            Some(3),
        ),
        // A product whose accepting tuples have no live successor.
        Hir::intersection([p("(?:ab)+"), p(".{0,4}")]),
    ];
    for hir in &cases {
        let nfa = Nfa::for_lazy(hir, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        assert!(
            nfa.automata()
                .iter()
                .all(|a| matches!(a, EmbeddedAutomaton::Lazy(_))),
            "{hir} is built whole"
        );
        assert_lazy_equals_complete(hir, &v, &tokens);
    }
}

/// Random expressions of intersections, complements, sequences and repetitions.
fn boolean_hir() -> impl proptest::strategy::Strategy<Value = Hir> {
    use proptest::prelude::*;
    let leaf = prop::sample::select(vec![
        "a",
        "b",
        "é",
        "ab",
        "a*",
        "(?:ab)+",
        "[ab]{0,3}",
        ".",
        ".{1,4}",
        "a.b",
        "é+",
        "",
        ".*b.*",
        "[^a]*",
    ])
    .prop_map(|s| parse(s).unwrap());
    leaf.prop_recursive(3, 24, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::intersection),
            inner.clone().prop_map(Hir::complement),
            prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::concat),
            prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::alternation),
            (inner, 0u32..2, 1u32..3).prop_map(|(h, lo, hi)| Hir::repeat(h, lo, Some(hi))),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn random_lazy_products_equal_complete_automata(hir in boolean_hir()) {
        let tokens = ["a", "b", "ab", "ba", "é", "aé", "bb", "aaa"];
        let v = vocab(&tokens, tokens.len() as u32);
        assert_lazy_equals_complete(&hir, &v, &tokens);
    }
}

#[test]
fn a_product_past_its_limit_fails_the_step_that_reaches_it() {
    // `.{0,400}` against "no `bb`" needs a tuple per length: far past a limit of 50 states
    // (200 tuples), but reached only as the input grows.
    let hir = Hir::intersection([
        parse(".{0,400}").unwrap(),
        Hir::complement(parse(".*bb.*").unwrap()),
    ]);
    let v = vocab(&["a", "b", "aaaa"], 3);
    let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
    let config = IndexConfig {
        max_states: 50,
        ..IndexConfig::default()
    };
    let idx = TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &config).expect("index");
    let mut state = idx.initial_state();
    let mut failed = None;
    for step in 0..400 {
        match idx.mask(state).and_then(|_| idx.next_state(state, 2)) {
            Ok(next) => state = next,
            Err(e) => {
                failed = Some((step, e));
                break;
            }
        }
    }
    let (step, e) = failed.expect("the limit is reached");
    assert!(step > 0, "the first mask fits");
    assert!(matches!(e, Error::SizeLimit { .. }), "{e}");
    // And it stays failed rather than answering from what it could not finish.
    assert!(idx.mask(state).is_err() || idx.next_state(state, 2).is_err());
}

#[test]
fn lazy_states_without_a_future_are_dead() {
    // Neither pattern matches anything past its first byte; a lazy automaton must know.
    let v = vocab(&["a", "b", "ab"], 3);
    for pattern in [".a^b", "a$b|ab^", "(?:a|b)+$a"] {
        let idx = index(pattern, &v, true);
        assert!(idx.mask(1).unwrap().is_empty(), "{pattern}");
    }
    let idx = index("a(?:b$|b^c)", &v, true);
    assert_eq!(idx.mask(1).unwrap().ids(), vec![0, 2]);
}

#[test]
fn a_lazy_index_counts_the_automaton_it_is_still_building() {
    // Caches evict by `memory_bytes`: the NFA and the state sets of a lazy index are part of
    // what it holds, and they grow as states are visited.
    let v = vocab(&["a", "b", "ab"], 3);
    let pattern = "(?:a|b)*a(?:a|b){12}";
    let lazy = index(pattern, &v, true);
    let nfa_bytes = read(&lazy.machine)
        .determinizer
        .as_ref()
        .map(|d| d.nfa().memory_bytes())
        .unwrap();
    let before = lazy.memory_bytes();
    assert!(before > lazy.tries.memory_bytes() + nfa_bytes);
    let mut state = lazy.initial_state();
    for _ in 0..12 {
        state = lazy.next_state(state, 2).unwrap();
    }
    assert!(lazy.memory_bytes() > before);
}

#[test]
fn eos_only_in_accepting_states_and_terminal_after() {
    let v = vocab(&["a", "b"], 2);
    let idx = index("ab", &v, true);
    assert_eq!(idx.next_state(1, 2).unwrap(), DEAD);
    let s = idx.next_state(idx.next_state(1, 0).unwrap(), 1).unwrap();
    assert!(idx.is_accepting(s) && idx.is_final(s).unwrap());
    assert_eq!(idx.next_state(s, 2).unwrap(), TERMINAL);
    assert_eq!(idx.mask(s).unwrap().ids(), vec![2]);
}

#[test]
fn bad_tokens_and_states_are_errors() {
    let v = vocab(&["a"], 1);
    let idx = index("a", &v, true);
    assert!(matches!(
        idx.next_state(1, 5),
        Err(Error::InvalidToken { .. })
    ));
    assert!(matches!(
        idx.next_state(1, -1),
        Err(Error::InvalidToken { .. })
    ));
    assert!(idx.mask(77).is_err());
}

#[test]
fn lazy_index_serves_a_pattern_whose_full_dfa_is_huge() {
    // The full DFA of this pattern has about 2^20 states; a few tokens visit a handful.
    let v = vocab(&["a", "b", "ab"], 3);
    let hir = parse("(a|b)*a(a|b){20}").unwrap();
    assert!(Dfa::from_hir(&hir, &DfaConfig::default()).is_err());
    let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
    let idx = TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &IndexConfig::default()).unwrap();
    let mut s = idx.initial_state();
    for _ in 0..5 {
        assert_eq!(idx.mask(s).unwrap().len(), 3);
        s = idx.next_state(s, 2).unwrap();
    }
    assert!(idx.num_states() < 200);
}

#[test]
fn identical_masks_are_stored_once() {
    let v = vocab(&["a", "b"], 2);
    let idx = index("[ab]{6}", &v, false);
    let mut s = idx.initial_state();
    for _ in 0..5 {
        idx.mask(s).unwrap();
        s = idx.next_state(s, 0).unwrap();
    }
    assert_eq!(idx.num_masks(), 1);
}

#[test]
fn forced_bytes_follow_the_only_way_on() {
    let v = vocab(&["a"], 1);
    let idx = index("\\{\"name\": \"[a-z]+\"\\}", &v, true);
    assert_eq!(idx.forced_bytes(1, 100).unwrap(), b"{\"name\": \"");
    assert_eq!(idx.forced_bytes(1, 3).unwrap(), b"{\"n");
}
