//! The Dockerfile and .dockerignore, checked on paper against the workspace and
//! compose.yaml: what it builds, with which toolchain, as whom it runs, and whether the
//! build context holds what the build needs.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::stack::{self, compose, port_of, read, root};

/// One instruction, continuation lines joined, comments dropped.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    arguments: String,
}

/// One build stage: its `FROM` image, its name, and what follows.
#[derive(Debug)]
struct Stage {
    image: String,
    name: Option<String>,
    instructions: Vec<Instruction>,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut found = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        // Comment lines (and parser directives) are dropped, even inside a continuation.
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(body) = line.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, arguments) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
        found.push(Instruction { keyword: keyword.to_ascii_uppercase(), arguments: arguments.trim().to_owned() });
        current.clear();
    }
    assert!(current.is_empty(), "the Dockerfile ends inside a continuation");
    found
}

fn stages() -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for instruction in instructions(&read("Dockerfile")) {
        if instruction.keyword == "FROM" {
            let words: Vec<&str> =
                instruction.arguments.split_whitespace().filter(|word| !word.starts_with("--")).collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                [_] => None,
                other => panic!("unexpected FROM {other:?}"),
            };
            stages.push(Stage { image: words[0].to_owned(), name, instructions: Vec::new() });
        } else {
            stages.last_mut().expect("the Dockerfile starts with FROM").instructions.push(instruction);
        }
    }
    stages
}

fn final_stage() -> Stage {
    stages().pop().expect("the Dockerfile has a stage")
}

/// The `major.minor` of a `rust:1.89-bookworm`-style tag.
fn rust_version_of(image: &str) -> (u32, u32) {
    let tag = image.strip_prefix("rust:").unwrap_or_else(|| panic!("the builder runs {image}, not the rust image"));
    version(tag.split('-').next().unwrap_or_default())
        .unwrap_or_else(|| panic!("{image} does not pin a Rust version: the build would change under us"))
}

fn version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The workspace's `rust-version` (Cargo.toml, `[workspace.package]`).
fn workspace_rust_version() -> (u32, u32) {
    read("Cargo.toml")
        .lines()
        .find_map(|line| line.trim().strip_prefix("rust-version"))
        .and_then(|rest| version(rest.trim_start_matches([' ', '=']).trim_matches('"')))
        .expect("Cargo.toml declares rust-version")
}

/// The host's target triple, as rustc names it.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(rustc).arg("-vV").output().expect("run rustc -vV");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

/// The newest `rust-version` among the packages the two binaries are built from on a
/// Linux host like the image's builder. Filtering by platform also keeps `--offline`
/// working where only this platform's crates were ever downloaded (a fresh machine).
fn newest_dependency_rust_version() -> ((u32, u32), String) {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &host_triple()])
        .current_dir(root())
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let nodes = metadata["resolve"]["nodes"].as_array().expect("resolve nodes");
    let packages = metadata["packages"].as_array().expect("packages");
    // Walk normal and build dependencies from the binaries' packages (not dev ones).
    let mut pending: Vec<String> = packages
        .iter()
        .filter(|package| stack::LECTERN_BINARIES.contains(&package["name"].as_str().unwrap_or_default()))
        .map(|package| package["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = pending.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let node = nodes.iter().find(|node| node["id"] == id.as_str()).expect("a resolved package");
        for dependency in node["deps"].as_array().into_iter().flatten() {
            let kinds = dependency["dep_kinds"].as_array().into_iter().flatten();
            if kinds.clone().any(|kind| kind["kind"].is_null() || kind["kind"] == "build") {
                pending.push(dependency["pkg"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    packages
        .iter()
        .filter(|package| seen.contains(package["id"].as_str().unwrap_or_default()))
        .filter_map(|package| {
            let version = version(package["rust_version"].as_str()?)?;
            Some((version, format!("{} {}", package["name"], package["version"])))
        })
        .max()
        .expect("some package declares a rust-version")
}

#[test]
fn the_dockerfile_builds_in_a_rust_stage_and_runs_in_a_small_one() {
    let stages = stages();

    assert!(stages.len() >= 2, "one stage would ship the whole toolchain: {stages:?}");
    assert!(stages[0].image.starts_with("rust:"), "the first stage builds with the official rust image");
    let runtime = &stages[stages.len() - 1].image;
    assert!(
        ["debian:bookworm-slim", "gcr.io/distroless/cc-debian12"].iter().any(|small| runtime.starts_with(small)),
        "the final stage runs on {runtime}, not a small Debian 12 image"
    );
}

#[test]
fn the_final_stage_copies_its_binaries_from_the_build_stage() {
    let stages = stages();
    let builder = stages[0].name.clone().expect("the build stage is named (FROM ... AS builder)");

    let sources: Vec<&str> = stages[stages.len() - 1]
        .instructions
        .iter()
        .filter(|instruction| instruction.keyword == "COPY")
        .filter_map(|copy| copy.arguments.split_whitespace().find_map(|word| word.strip_prefix("--from=")))
        .collect();

    assert!(!sources.is_empty(), "the final stage copies nothing from another stage");
    assert!(sources.iter().all(|source| *source == builder), "COPY --from {sources:?}, not {builder}");
}

#[test]
fn the_builder_and_the_runtime_share_one_debian_release() {
    let stages = stages();

    // A binary linked against a newer glibc than the runtime's does not start.
    assert!(stages[0].image.ends_with("-bookworm"), "the builder {} is not Debian 12 (bookworm)", stages[0].image);
    let runtime = &stages[stages.len() - 1].image;
    assert!(runtime.contains("bookworm") || runtime.contains("debian12"), "the runtime {runtime} is not Debian 12");
}

#[test]
fn the_builder_toolchain_is_no_older_than_the_workspace_and_its_locked_dependencies() {
    let builder = rust_version_of(&stages()[0].image);

    let (newest, package) = newest_dependency_rust_version();

    assert!(builder >= workspace_rust_version(), "rust {builder:?} is older than Cargo.toml's rust-version");
    assert!(builder >= newest, "rust {builder:?} cannot build {package}, which needs {newest:?}");
}

#[test]
fn the_builder_compiles_both_binaries_in_release_mode_with_the_locked_dependencies() {
    let builder = stages().remove(0);

    let build = builder
        .instructions
        .iter()
        .find(|instruction| instruction.keyword == "RUN" && instruction.arguments.contains("cargo build"))
        .expect("the builder runs cargo build");

    for needed in ["--release", "--locked", "lectern-api", "lectern-projector"] {
        assert!(build.arguments.contains(needed), "cargo build lacks {needed}: {}", build.arguments);
    }
}

#[test]
fn the_final_stage_runs_as_a_numeric_non_root_user() {
    let stage = final_stage();

    let user = stage.instructions.iter().rev().find(|instruction| instruction.keyword == "USER");

    let user = user.map(|user| user.arguments.clone()).unwrap_or_else(|| "root (no USER)".to_owned());
    let uid = user.split(':').next().unwrap_or_default();
    let uid: u32 = uid.parse().unwrap_or_else(|_| panic!("USER {user}: a numeric uid lets runAsNonRoot verify it"));
    assert_ne!(uid, 0, "the image runs as root");
}

#[test]
fn the_image_holds_in_usr_local_bin_exactly_the_binaries_compose_runs() {
    let compose = compose();
    let mut run = BTreeSet::new();
    for service in compose.lectern_services() {
        run.extend(service.argv().into_iter().take(1));
        run.extend(service.healthcheck().into_iter().flatten().take(1));
    }

    let mut copied = BTreeSet::new();
    for copy in final_stage().instructions.iter().filter(|instruction| instruction.keyword == "COPY") {
        let words: Vec<&str> = copy.arguments.split_whitespace().filter(|word| !word.starts_with("--")).collect();
        let (destination, sources) = words.split_last().expect("COPY has a destination");
        if let Some(name) = destination.strip_prefix("/usr/local/bin/").filter(|name| !name.is_empty()) {
            copied.insert(name.to_owned());
        } else if *destination == "/usr/local/bin/" || *destination == "/usr/local/bin" {
            copied.extend(sources.iter().filter_map(|source| source.rsplit('/').next()).map(str::to_owned));
        }
    }

    assert_eq!(copied, run, "binaries in /usr/local/bin vs the ones compose.yaml runs");
}

#[test]
fn the_image_exposes_the_port_the_api_listens_on() {
    let compose = compose();
    let listen = compose.service("api").environment().get("LECTERN_LISTEN").cloned().expect("LECTERN_LISTEN");

    let exposed: Vec<String> = final_stage()
        .instructions
        .iter()
        .filter(|instruction| instruction.keyword == "EXPOSE")
        .flat_map(|expose| expose.arguments.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();

    assert!(exposed.contains(&port_of(&listen).to_string()), "EXPOSE {exposed:?} lacks the api's port ({listen})");
}

/// Whether `.dockerignore` leaves `path` (relative to the root) out of the context.
fn ignored(path: &str, patterns: &[String]) -> bool {
    let mut excluded = false;
    for pattern in patterns {
        let (negated, pattern) = pattern.strip_prefix('!').map_or((false, pattern.as_str()), |rest| (true, rest));
        let pattern = pattern.trim_end_matches('/');
        let anywhere = pattern.strip_prefix("**/");
        let components: Vec<&str> = path.split('/').collect();
        let matches = (0..components.len()).any(|depth| {
            let prefix = components[..=depth].join("/");
            match anywhere {
                Some(tail) => (0..=depth).any(|start| glob(tail, &components[start..=depth].join("/"))),
                None => glob(pattern, &prefix),
            }
        });
        if matches {
            excluded = !negated;
        }
    }
    excluded
}

/// `*` matches within one path component; everything else is literal.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (head.len()..=text.len()).any(|at| !text[head.len()..at].contains('/') && glob(tail, &text[at..]))
        }
    }
}

fn dockerignore() -> Vec<String> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.trim_start_matches('/').to_owned())
        .collect()
}

#[test]
fn the_build_context_leaves_out_build_output_git_and_env_files() {
    let patterns = dockerignore();

    for path in ["target", "target/release/lectern-api", ".git", ".env", ".env.production"] {
        assert!(ignored(path, &patterns), "{path} is sent to the builder");
    }
}

#[test]
fn the_build_context_keeps_what_cargo_needs_to_build_the_workspace() {
    let patterns = dockerignore();

    for path in ["Cargo.toml", "Cargo.lock", "api/Cargo.toml", "api/src/main.rs", "projector/src/main.rs"] {
        assert!(!ignored(path, &patterns), "{path} is left out of the build context");
    }
    for member in workspace_members() {
        let manifest = format!("{member}/Cargo.toml");
        assert!(!ignored(&manifest, &patterns), "{manifest} is left out of the build context");
    }
    assert!(!ignored("migrations", &patterns), "migrations is left out of the build context");
}

/// The workspace's member crates, as the root manifest lists them.
fn workspace_members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("read the root Cargo.toml");
    let list = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members = ["))
        .and_then(|rest| rest.strip_suffix(']'))
        .expect("a one-line `members = [...]` in the root Cargo.toml");
    let members: Vec<String> = list.split(',').map(|member| member.trim().trim_matches('"').to_owned()).collect();
    assert!(members.len() >= 3, "too few members read from {list:?}");
    members
}

/// Files the binaries' crates read at compile time (`include_str!`, `include_bytes!`,
/// `sqlx::migrate!`), as paths relative to the workspace root.
fn embedded_files() -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for krate in workspace_members() {
        let crate_dir = root().join(&krate);
        let mut pending = vec![crate_dir.join("src")];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).expect("read a source directory").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.extension().is_some_and(|extension| extension == "rs") {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    for (macro_name, argument) in macro_arguments(&text) {
                        let literals: Vec<&str> = argument.split('"').skip(1).step_by(2).collect();
                        let target = if argument.contains("CARGO_MANIFEST_DIR") {
                            let rest: String =
                                literals.iter().filter(|l| **l != "CARGO_MANIFEST_DIR").copied().collect();
                            crate_dir.join(rest.trim_start_matches('/'))
                        } else if macro_name == "migrate!" {
                            crate_dir.join(literals.concat())
                        } else {
                            path.parent().expect("a source directory").join(literals.concat())
                        };
                        found.push((format!("{}: {macro_name}({argument})", path.display()), normalise(&target)));
                    }
                }
            }
        }
    }
    found
}

fn macro_arguments(text: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for macro_name in ["include_str!", "include_bytes!", "migrate!"] {
        for (at, _) in text.match_indices(&format!("{macro_name}(")) {
            let rest = &text[at + macro_name.len() + 1..];
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(rest.len(), |(end, _)| end);
            found.push((macro_name, rest[..end].to_owned()));
        }
    }
    found
}

/// `path` with `.` and `..` resolved lexically.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_file_the_binaries_embed_at_compile_time_is_in_the_build_context() {
    let root = normalise(&root());
    let patterns = dockerignore();

    let embedded = embedded_files();

    assert!(!embedded.is_empty(), "the migrations at least are embedded");
    for (site, target) in embedded {
        let relative = target.strip_prefix(&root).unwrap_or_else(|_| panic!("{site} reads outside the workspace"));
        let relative = relative.to_string_lossy();
        assert!(!ignored(&relative, &patterns), "{site} reads {relative}, which .dockerignore leaves out");
        assert!(target.exists(), "{site} reads {relative}, which does not exist");
    }
}

#[test]
fn dockerignore_patterns_match_as_docker_matches_them() {
    let patterns: Vec<String> = ["target/", "**/target/", ".env", ".env.*", "!.env.example"].map(str::to_owned).into();

    assert!(ignored("target/debug/x", &patterns));
    assert!(ignored("api/target", &patterns));
    assert!(ignored(".env.local", &patterns));
    assert!(!ignored(".env.example", &patterns));
    assert!(!ignored("api/src/env.rs", &patterns));
}

/// The rule: the build pulls nothing but its base images. A `# syntax=` parser directive
/// makes BuildKit pull that frontend image before anything else, so an offline build (or a
/// mirror holding only the base images) fails on it alone; BuildKit's built-in frontend
/// reads everything this Dockerfile uses (`RUN --mount` included).
#[test]
fn the_dockerfile_names_no_frontend_image_to_pull() {
    let text = read("Dockerfile");
    // Parser directives are `# key=value` lines before the first instruction or comment.
    let directives = text.lines().take_while(|line| line.starts_with("# ") && line.contains('=')).collect::<Vec<_>>();
    assert!(
        !directives.iter().any(|line| line
            .trim_start_matches("# ")
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("syntax")),
        "the Dockerfile pulls a frontend image: {directives:?}"
    );
}
