//! `docs/architecture.md` is the map of the code: every folder of Rust code has its line
//! there, as a link (whose target the links test checks), so a folder added, moved or
//! removed without the map fails here rather than leaving the map behind.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_folder_of_rust_code_has_a_line_in_the_architecture_map() {
    let root = crate::stack::root();
    let map = std::fs::read_to_string(root.join("docs").join("architecture.md")).expect("read docs/architecture.md");
    let missing: Vec<String> =
        folders_of_rust_code(&root).into_iter().filter(|folder| !has_line(&map, folder)).collect();
    assert!(
        missing.is_empty(),
        "folders of Rust code without a line in docs/architecture.md (\"Each crate's folders\"): {missing:?}"
    );
}

#[test]
fn a_folder_is_found_missing_unless_the_map_links_it() {
    let map = "| [`api/src/feed/`](../api/src/feed/) | the feed |\nsee api/src/listing/ too\n";
    assert!(has_line(map, "api/src/feed/"));
    assert!(!has_line(map, "api/src/listing/"), "a mention that is not a link counts");
    assert!(!has_line(map, "api/src/"), "a longer folder's link counts for its parent");
}

/// Whether `map` links `folder` (relative to the root, ending in `/`) from `docs/`.
fn has_line(map: &str, folder: &str) -> bool {
    map.contains(&format!("](../{folder})"))
}

/// Every folder under `root` that holds a `.rs` file of its own, relative to the root and
/// ending in `/`.
fn folders_of_rust_code(root: &Path) -> BTreeSet<String> {
    crate::docs_links::files_with_extension(root, "rs")
        .iter()
        .filter_map(|file| file.parent()?.strip_prefix(root).ok())
        .filter(|folder| !folder.as_os_str().is_empty())
        .map(|folder| format!("{}/", folder.display()))
        .collect()
}
