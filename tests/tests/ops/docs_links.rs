//! The Markdown files' links, checked: every relative link in every Markdown file of the
//! repository names a file or directory that exists inside it, and a `#anchor` names a
//! heading of its target (GitHub's anchors). A link that leaves the repository (`../…`
//! past its root, an absolute path, `file:`) is refused: the docs say what they need in
//! their own words. Web links (`https:` and other schemes) are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Directories of the root that hold no documentation of ours.
const SKIPPED: [&str; 2] = ["target", ".git"];

/// A link as written in a Markdown file.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    /// 1-based line of the file.
    line: usize,
    /// The destination, as written.
    target: String,
}

#[test]
fn every_relative_link_in_every_markdown_file_resolves_inside_the_repository() {
    let root = root();
    let files = markdown_files(&root);
    assert!(files.iter().any(|file| file.ends_with("README.md")), "no README.md found under {}", root.display());

    let problems: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("read {}: {error}", file.display()));
            let shown = file.strip_prefix(&root).unwrap_or(file).display().to_string();
            links(&text)
                .into_iter()
                .filter_map(|link| {
                    problem(&root, file, &text, &link.target).map(|why| format!("{shown}:{}: {why}", link.line))
                })
                .collect::<Vec<_>>()
        })
        .collect();

    assert!(problems.is_empty(), "{} broken link(s):\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn a_link_that_is_missing_leaves_the_repository_or_names_no_heading_is_refused() {
    let root = root();
    let file = root.join("docs").join("example.md");
    let text = "\
# Example

[fine](api.md) and [fine too](api.md#paging-and-cursors), [here](#example), [up](../README.md).
[missing](no-such-file.md)
[shared](../../shared/spec/decisions.md) and [absolute](/work/shared/spec/decisions.md)
[no heading](api.md#no-such-heading) [no heading here](#nowhere)
[web](https://example.com/x.md) `[in code](no-such-file.md)`

```sh
[in a fence](no-such-file.md)
```

[definition]: ../../outside.md
";
    let refused: BTreeMap<String, String> = links(text)
        .into_iter()
        .filter_map(|link| problem(&root, &file, text, &link.target).map(|why| (link.target, why)))
        .collect();

    let expected = [
        ("no-such-file.md", "does not exist"),
        ("../../shared/spec/decisions.md", "leaves the repository"),
        ("/work/shared/spec/decisions.md", "leaves the repository"),
        ("api.md#no-such-heading", "no heading"),
        ("#nowhere", "no heading"),
        ("../../outside.md", "leaves the repository"),
    ];
    assert_eq!(refused.len(), expected.len(), "{refused:#?}");
    for (target, why) in expected {
        let found = refused.get(target).unwrap_or_else(|| panic!("{target} was not refused: {refused:#?}"));
        assert!(found.contains(why), "{target}: {found}");
    }
}

#[test]
fn anchors_are_github_slugs_of_the_headings() {
    let text = "\
# Lectern
## `lectern-api serve`
### Publish→visible
## One workspace's share
## 2026-11-25, 19:45-22:30: the heap out of huge pages (kept)
## Errors
## Errors
```
# not a heading
```
";
    let found = anchors(text);
    for expected in [
        "lectern",
        "lectern-api-serve",
        "publishvisible",
        "one-workspaces-share",
        "2026-11-25-1945-2230-the-heap-out-of-huge-pages-kept",
        "errors",
        "errors-1",
    ] {
        assert!(found.contains(expected), "{expected} missing from {found:?}");
    }
    assert!(!found.contains("not-a-heading"), "{found:?}");
}

/// The repository's root, without `..` in it.
fn root() -> PathBuf {
    let root = crate::stack::root();
    root.canonicalize().unwrap_or_else(|error| panic!("canonicalize {}: {error}", root.display()))
}

/// Every `.md` file under `root`, but for the skipped directories of the root.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    files_with_extension(root, "md")
}

/// Every file ending in `.<extension>` under `root`, but for the skipped directories of
/// the root (build output, git's own).
pub fn files_with_extension(root: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let entries =
            std::fs::read_dir(&directory).unwrap_or_else(|error| panic!("list {}: {error}", directory.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                let skipped = directory == root && SKIPPED.iter().any(|name| path.file_name() == Some(name.as_ref()));
                if !skipped {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|found| found == extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What is wrong with the link `target` written in `file` (whose text is `text`), if anything.
fn problem(root: &Path, file: &Path, text: &str, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty link".to_owned());
    }
    if target.starts_with('/') || target.starts_with('\\') || target.to_ascii_lowercase().starts_with("file:") {
        return Some(format!("{target}: an absolute path leaves the repository; link relative to this file"));
    }
    if has_scheme(target) {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let Some(path) = percent_decode(path) else {
        return Some(format!("{target}: not valid percent-encoding"));
    };
    let anchor = percent_decode(anchor).unwrap_or_else(|| anchor.to_owned());
    if path.is_empty() {
        return (!anchors(text).contains(&anchor)).then(|| format!("{target}: no heading of that anchor in this file"));
    }
    let resolved = file.parent().unwrap_or(root).join(&path);
    let Some(resolved) = inside(root, &resolved) else {
        return Some(format!("{target}: leaves the repository; say it in our own words or copy it in"));
    };
    if !resolved.exists() {
        return Some(format!(
            "{target}: {} does not exist",
            resolved.strip_prefix(root).unwrap_or(&resolved).display()
        ));
    }
    if anchor.is_empty() || resolved.extension().is_none_or(|extension| extension != "md") {
        return None;
    }
    let target_text =
        std::fs::read_to_string(&resolved).unwrap_or_else(|error| panic!("read {}: {error}", resolved.display()));
    (!anchors(&target_text).contains(&anchor)).then(|| format!("{target}: no heading of that anchor in {path}"))
}

/// `path` with `.` and `..` resolved lexically, if it stays within `root`.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let relative = path.strip_prefix(root).ok()?;
    let mut parts: Vec<Component<'_>> = Vec::new();
    for component in relative.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(component),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().fold(root.to_path_buf(), |path, part| path.join(part)))
}

/// Whether `target` starts with a URI scheme (`https:`, `mailto:`), so it is not a path.
fn has_scheme(target: &str) -> bool {
    let Some((scheme, _)) = target.split_once(':') else { return false };
    let mut characters = scheme.chars();
    characters.next().is_some_and(|first| first.is_ascii_alphabetic())
        && characters.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !scheme.contains('/')
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// The links of a Markdown text: inline links and images (`[text](target)`) and reference
/// definitions (`[label]: target`), outside fenced code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (index, line) in prose_lines(text) {
        let line = without_code_spans(line);
        if let Some(target) = reference_definition(&line) {
            found.push(Link { line: index + 1, target });
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let (target, after) = destination(&rest[at + 2..]);
            found.push(Link { line: index + 1, target });
            rest = after;
        }
    }
    found
}

/// The lines outside fenced code blocks, with their 0-based index.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<String> = None;
    let mut prose = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed.chars().take_while(|c| *c == '`' || *c == '~').collect();
        let opens = marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap_or('`'));
        match &fence {
            Some(open) if opens && marker.starts_with(open.as_str()) && trimmed.trim_end() == marker => fence = None,
            Some(_) => {}
            None if opens => fence = Some(marker),
            None => prose.push((index, line)),
        }
    }
    prose
}

/// `line` with every code span (`` `…` ``, ``` ``…`` ```) taken out.
fn without_code_spans(line: &str) -> String {
    let mut kept = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        kept.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + run..];
        let closing = "`".repeat(run);
        let mut search = 0;
        let mut end = None;
        while let Some(found) = after[search..].find(&closing) {
            let at = search + found;
            let longer = after[at + run..].starts_with('`');
            if !longer {
                end = Some(at);
                break;
            }
            search = at + run + after[at + run..].chars().take_while(|c| *c == '`').count();
        }
        match end {
            Some(end) => rest = &after[end + run..],
            None => {
                kept.push_str(&rest[start..start + run]);
                rest = after;
            }
        }
    }
    kept.push_str(rest);
    kept
}

/// The target of a reference definition line (`[label]: target "title"`).
fn reference_definition(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = line.trim_start_matches(' ');
    if indent > 3 || !rest.starts_with('[') || rest.starts_with("[^") {
        return None;
    }
    let (_, after) = rest.split_once("]:")?;
    let target = after.split_whitespace().next()?;
    Some(target.trim_start_matches('<').trim_end_matches('>').to_owned())
}

/// An inline link's destination at the start of `text` (just after `](`), and what follows
/// its closing parenthesis.
fn destination(text: &str) -> (String, &str) {
    let text = text.trim_start();
    if let Some(bracketed) = text.strip_prefix('<') {
        let end = bracketed.find('>').unwrap_or(bracketed.len());
        let after = bracketed[end..].find(')').map_or("", |close| &bracketed[end + close + 1..]);
        return (bracketed[..end].to_owned(), after);
    }
    let mut depth = 0usize;
    let mut end = text.len();
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                end = at;
                break;
            }
            ')' => depth -= 1,
            c if c.is_whitespace() => {
                end = at;
                break;
            }
            _ => {}
        }
    }
    let after = text[end..].find(')').map_or("", |close| &text[end + close + 1..]);
    (text[..end].to_owned(), after)
}

/// The anchors GitHub gives a Markdown text's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if line.len() - trimmed.len() > 3 || !(1..=6).contains(&level) {
            continue;
        }
        let heading = &trimmed[level..];
        if !(heading.is_empty() || heading.starts_with(' ') || heading.starts_with('\t')) {
            continue;
        }
        let heading = heading.trim().trim_end_matches('#').trim_end();
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        found.insert(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
        *count += 1;
    }
    found
}

/// GitHub's slug of a heading: its text as shown (code, links and emphasis unwrapped),
/// lower-cased, without punctuation but `-` and `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    let mut shown = String::with_capacity(heading.len());
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        let (_, after) = destination(&rest[at + 2..]);
        shown.push_str(&rest[..at]);
        rest = after;
    }
    shown.push_str(rest);
    shown
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
