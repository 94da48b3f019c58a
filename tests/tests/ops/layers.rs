//! Every import in `lectern-api` and `lectern-projector` points down. Each crate's top-level
//! modules (a file `src/x.rs` or a folder `src/x/`; `main.rs` and `lib.rs` are the top)
//! stand in layers, written once in [`LAYERS`], and a `crate::` path in a module's code
//! may name only modules of a lower layer. Two modules of one layer name neither: when one
//! comes to need the other, the two go on separate layers, so that what a module may
//! use is read off the table, never off its code. A top-level module the table does not
//! place fails too, so that a new module is placed when it is added.

use std::collections::BTreeSet;

/// One crate's top-level modules by layer, top first.
struct Layered {
    /// The crate's source folder, from the workspace root.
    source: &'static str,
    layers: &'static [&'static [&'static str]],
}

/// The layers of both crates: the one place they are written.
const LAYERS: &[Layered] = &[
    Layered {
        source: "api/src",
        layers: &[
            &["main", "lib"],
            &["cli"],
            &["config"],
            &["http"],
            &["app"],
            &["webhooks"],
            // Above listing: the feed's tests prove a listing cursor is not a sync token.
            &["feed", "listing", "retrieve"],
            &["keys"],
            &["error"],
            &["reads"],
            &["resources"],
            &["memory", "query_values", "rate_limit", "signing", "telemetry"],
            &["metric_names"],
        ],
    },
    Layered {
        source: "projector/src",
        layers: &[
            &["main", "lib"],
            &["cli"],
            // The always-running loop and the operator's tools: what both need is below.
            &["daemon", "repair"],
            &["apply", "history", "lost_events", "verifications"],
            &["dead_letters", "stream"],
            &["connections"],
            &["error", "message", "metrics"],
        ],
    },
];

#[test]
fn every_crate_path_names_a_module_of_a_lower_layer() {
    let root = crate::stack::root();
    let mut problems = Vec::new();
    for layered in LAYERS {
        let source = root.join(layered.source);
        let files: Vec<(String, String)> = crate::docs_links::files_with_extension(&source, "rs")
            .into_iter()
            .map(|path| {
                let text =
                    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
                let relative = path.strip_prefix(&source).expect("a file found under its folder");
                (relative.to_string_lossy().replace('\\', "/"), text)
            })
            .collect();
        problems.extend(wrong_arrows(layered, &files));
    }
    assert!(
        problems.is_empty(),
        "imports that do not point down the layers in tests/tests/ops/layers.rs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scanner_names_upward_and_sideways_arrows_and_reads_only_code() {
    let files = sketch(&[
        ("bottom.rs", "use crate::{\n    side,\n};\nuse crate::Root;\n"),
        ("lib.rs", "pub mod top;\n"),
        ("middle/inner.rs", "fn value() -> u8 {\n    crate::top::value(\n    )\n}\n"),
        (
            "middle/mod.rs",
            "// crate::top, mentioned\n/// See [`crate::top`].\n//! crate::top\n/* crate::top */\n\
             const NAME: &str = \"crate::top\";\nfn use_it<'a>(text: &'a str) -> char { crate::bottom::first(text, 'c') }\n",
        ),
        ("side.rs", "use crate::middle::Thing;\n"),
        ("top.rs", "use crate::{bottom::Thing, middle::{a, b}};\n"),
    ]);
    assert_eq!(
        wrong_arrows(&SKETCH, &files),
        [
            "sketch/src/bottom.rs:2: bottom -> side (a higher layer)",
            "sketch/src/bottom.rs:4: bottom -> lib (a higher layer)",
            "sketch/src/middle/inner.rs:2: middle -> top (a higher layer)",
            "sketch/src/side.rs:1: side -> middle (the same layer)",
        ]
    );
}

#[test]
fn a_module_on_no_layer_and_a_layer_listing_no_module_are_named() {
    let files = sketch(&[("lib.rs", ""), ("top.rs", ""), ("middle.rs", ""), ("stray/mod.rs", "")]);
    assert_eq!(
        wrong_arrows(&SKETCH, &files),
        [
            "sketch/src: `stray` is on no layer: place it in tests/tests/ops/layers.rs",
            "sketch/src: `side`, on a layer, is no module: take it off",
            "sketch/src: `bottom`, on a layer, is no module: take it off",
        ]
    );
}

#[test]
fn grouped_uses_and_inline_paths_name_their_first_module() {
    let source = "use crate::{a, b::c, d::{e, f::g}};\nlet x = crate::reads::is_unavailable(&error);\n\
                  macro_rules! m { () => { $crate::hidden } }\n";
    assert_eq!(
        crate_references(source),
        [("a", 1), ("b", 1), ("d", 1), ("reads", 2)].map(|(name, line)| (name.to_owned(), line))
    );
}

/// A made-up crate for the scanner's own tests.
const SKETCH: Layered =
    Layered { source: "sketch/src", layers: &[&["main", "lib"], &["top"], &["middle", "side"], &["bottom"]] };

fn sketch(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files.iter().map(|(path, text)| ((*path).to_owned(), (*text).to_owned())).collect()
}

/// What breaks `layered`'s layers among `files` (paths relative to its source folder, and
/// their text): each `crate::` path naming a module of the same or a higher layer, as
/// `file:line: from -> to`, each module on no layer, and each module listed that is not.
fn wrong_arrows(layered: &Layered, files: &[(String, String)]) -> Vec<String> {
    let source = layered.source;
    let layer_of = |module: &str| layered.layers.iter().position(|layer| layer.contains(&module));
    let modules: BTreeSet<&str> = files.iter().map(|(path, _)| top_level_module(path)).collect();
    let mut problems: Vec<String> = modules
        .iter()
        .filter(|module| layer_of(module).is_none())
        .map(|module| format!("{source}: `{module}` is on no layer: place it in tests/tests/ops/layers.rs"))
        .collect();
    problems.extend(
        layered
            .layers
            .iter()
            .flat_map(|layer| layer.iter().copied())
            // A crate may have no binary, or no library.
            .filter(|listed| !modules.contains(listed) && !["main", "lib"].contains(listed))
            .map(|listed| format!("{source}: `{listed}`, on a layer, is no module: take it off")),
    );
    for (path, text) in files {
        let from = top_level_module(path);
        let Some(from_layer) = layer_of(from) else { continue };
        for (named, line) in crate_references(text) {
            // A name that is no module is an item of the crate's root.
            let to = if modules.contains(named.as_str()) { named.as_str() } else { "lib" };
            let Some(to_layer) = layer_of(to).filter(|_| to != from) else { continue };
            if to_layer <= from_layer {
                let which = if to_layer == from_layer { "the same layer" } else { "a higher layer" };
                problems.push(format!("{source}/{path}:{line}: {from} -> {to} ({which})"));
            }
        }
    }
    problems
}

/// The top-level module `path` (relative to the source folder) belongs to.
fn top_level_module(path: &str) -> &str {
    let first = path.split('/').next().unwrap_or(path);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The module each `crate::` path in `source`'s code names first, with its line:
/// `crate::reads::is_unavailable(` names `reads`, `use crate::{a, b::c}` names `a` and `b`.
fn crate_references(source: &str) -> Vec<(String, usize)> {
    let code: Vec<char> = code_only(source).chars().collect();
    let newlines: Vec<usize> = code.iter().enumerate().filter(|(_, c)| **c == '\n').map(|(at, _)| at).collect();
    let line_of = |at: usize| newlines.partition_point(|newline| *newline < at) + 1;
    let mut references = Vec::new();
    for at in 0..code.len() {
        let Some(after) = after_crate_path_start(&code, at) else { continue };
        if code.get(after) == Some(&'{') {
            references.extend(group_heads(&code, after).into_iter().map(|(name, at)| (name, line_of(at))));
        } else if let Some(name) = identifier_at(&code, after) {
            references.push((name, line_of(after)));
        }
    }
    references
}

/// Where what follows `crate ::` starts, if `crate` starts at `at` as a path's first segment
/// (not `$crate`, not part of a longer name).
fn after_crate_path_start(code: &[char], at: usize) -> Option<usize> {
    let word: Vec<char> = "crate".chars().collect();
    let end = at + word.len();
    let is_word = code.get(at..end) == Some(&word[..])
        && (at == 0 || !(is_identifier_char(code[at - 1]) || code[at - 1] == '$'))
        && !code.get(end).is_some_and(|c| is_identifier_char(*c));
    if !is_word {
        return None;
    }
    let colons = skip_whitespace(code, end);
    (code.get(colons..colons + 2) == Some(&[':', ':'][..])).then(|| skip_whitespace(code, colons + 2))
}

/// The first name of each item of the `{ … }` group opening at `open`, with where it is.
fn group_heads(code: &[char], open: usize) -> Vec<(String, usize)> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_starts = false;
    let mut at = open;
    while at < code.len() {
        match code[at] {
            '{' => {
                depth += 1;
                item_starts = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_starts = true,
            c if c.is_whitespace() => {}
            _ if depth == 1 && item_starts => {
                item_starts = false;
                if let Some(name) = identifier_at(code, at) {
                    let start = at;
                    at += name.chars().count();
                    heads.push((name, start));
                    continue;
                }
            }
            _ => {}
        }
        at += 1;
    }
    heads
}

fn identifier_at(code: &[char], at: usize) -> Option<String> {
    let first = *code.get(at)?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    Some(code[at..].iter().take_while(|c| is_identifier_char(**c)).collect())
}

fn is_identifier_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn skip_whitespace(code: &[char], mut at: usize) -> usize {
    while code.get(at).is_some_and(|c| c.is_whitespace()) {
        at += 1;
    }
    at
}

/// `source` with its comments (doc comments included), strings and characters blanked
/// and its lines kept, so that a `crate::` mentioned in prose or text is not taken for
/// one used.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut code = String::with_capacity(source.len());
    let mut at = 0;
    while at < chars.len() {
        let rest = &chars[at..];
        let skipped = if rest.starts_with(&['/', '/']) {
            rest.iter().take_while(|c| **c != '\n').count()
        } else if rest.starts_with(&['/', '*']) {
            block_comment_length(rest)
        } else if rest[0] == '"' {
            string_length(rest)
        } else if let Some(length) = raw_string_length(&chars, at) {
            length
        } else if rest[0] == '\'' {
            character_length(rest)
        } else {
            0
        };
        if skipped == 0 {
            code.push(rest[0]);
            at += 1;
        } else {
            code.extend(rest[..skipped.min(rest.len())].iter().map(|c| blank(*c)));
            at += skipped;
        }
    }
    code
}

/// The length of the block comment `rest` starts with, nested ones included.
fn block_comment_length(rest: &[char]) -> usize {
    let mut depth = 0;
    let mut at = 0;
    while at < rest.len() {
        if rest[at..].starts_with(&['/', '*']) {
            depth += 1;
            at += 2;
        } else if rest[at..].starts_with(&['*', '/']) {
            depth -= 1;
            at += 2;
            if depth == 0 {
                return at;
            }
        } else {
            at += 1;
        }
    }
    rest.len()
}

/// The length of the string `rest` starts with (its opening quote).
fn string_length(rest: &[char]) -> usize {
    let mut at = 1;
    while at < rest.len() {
        match rest[at] {
            '\\' => at += 2,
            '"' => return at + 1,
            _ => at += 1,
        }
    }
    rest.len()
}

/// The length of the raw string (`r"…"`, `r#"…"#`, `br#"…"#`) whose `r` is at `at`, if one is.
fn raw_string_length(chars: &[char], at: usize) -> Option<usize> {
    let starts_token = |position: usize| position == 0 || !is_identifier_char(chars[position - 1]);
    if chars[at] != 'r' || !(starts_token(at) || (chars[at - 1] == 'b' && starts_token(at - 1))) {
        return None;
    }
    let hashes = chars[at + 1..].iter().take_while(|c| **c == '#').count();
    let quote = at + 1 + hashes;
    if chars.get(quote) != Some(&'"') {
        return None;
    }
    let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let body = quote + 1;
    let end = (body..chars.len()).find(|position| chars[*position..].starts_with(&closing));
    Some(end.map_or(chars.len() - at, |end| end + closing.len() - at))
}

/// The length of the character literal `rest` starts with, or 0 for a lifetime.
fn character_length(rest: &[char]) -> usize {
    match rest.get(1..3) {
        Some(['\\', _]) => rest.iter().skip(3).position(|c| *c == '\'').map_or(rest.len(), |close| close + 4),
        Some([_, '\'']) => 3,
        _ => 0,
    }
}
