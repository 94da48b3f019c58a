//! What the real binaries accept, read from their `--help`: subcommands, flags, and
//! the environment variables clap reads (`[env: NAME=...]`).

use std::collections::BTreeSet;

use lectern_tests::binaries::Run;
use lectern_tests::process::Launch;

/// Variables the binaries read outside clap, so no `--help` lists them: the log
/// filter and the log format (`lectern_runtime::init_logging`).
pub const READ_OUTSIDE_CLAP: [&str; 2] = ["RUST_LOG", "LECTERN_LOG_FORMAT"];

/// `name args...` with an empty environment, so nothing of the runner's leaks in.
pub fn run(name: &str, args: &[&str]) -> Run {
    Launch::named(name).args(args).run_blocking()
}

/// What one `--help` page says.
#[derive(Debug, Default)]
pub struct Help {
    /// Subcommands listed under `Commands:`.
    pub subcommands: BTreeSet<String>,
    /// Every `--long` and `-s` flag listed under `Options:`.
    pub flags: BTreeSet<String>,
    /// Every variable listed as `[env: NAME...]`.
    pub env: BTreeSet<String>,
}

/// `name words... --help`, parsed; `None` when the binary refuses (no such subcommand).
pub fn help(name: &str, words: &[&str]) -> Option<Help> {
    let mut args = words.to_vec();
    args.push("--help");
    let run = run(name, &args);
    (run.code == Some(0)).then(|| parse_help(&run.stdout))
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut in_commands = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_commands = false;
        }
        if in_commands {
            if let Some(word) = trimmed.split_whitespace().next() {
                help.subcommands.insert(word.to_owned());
            }
        } else if trimmed.starts_with('-') {
            let spec = trimmed.split("  ").next().unwrap_or_default();
            for word in spec.split([' ', ',']).filter(|word| word.starts_with('-')) {
                help.flags.insert(word.to_owned());
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("[env: ") {
            rest = &rest[at + "[env: ".len()..];
            let end = rest.find(['=', ']']).unwrap_or(rest.len());
            help.env.insert(rest[..end].to_owned());
        }
    }
    help
}

/// Everything wrong with running `argv` (binary, subcommand, flags...) in the image.
pub fn problems_with_command(context: &str, argv: &[String]) -> Vec<String> {
    let Some(binary) = argv.first() else { return vec![format!("{context}: runs nothing")] };
    if !crate::stack::LECTERN_BINARIES.contains(&binary.as_str()) {
        return vec![format!("{context}: {binary:?} is not one of {:?}", crate::stack::LECTERN_BINARIES)];
    }
    let Some(subcommand) = argv.get(1) else { return vec![format!("{context}: names no subcommand")] };
    let top = help(binary, &[]).unwrap_or_else(|| panic!("{binary} --help fails"));
    let Some(page) = help(binary, &[subcommand]).filter(|_| top.subcommands.contains(subcommand)) else {
        return vec![format!("{context}: {binary} has no subcommand {subcommand:?} (it has {:?})", top.subcommands)];
    };
    argv[2..]
        .iter()
        .filter(|word| word.starts_with('-'))
        .map(|word| word.split('=').next().unwrap_or_default())
        .filter(|flag| !page.flags.contains(*flag))
        .map(|flag| format!("{context}: `{binary} {subcommand}` does not accept {flag} (it accepts {:?})", page.flags))
        .collect()
}

#[test]
fn help_pages_are_read_for_commands_flags_and_environment_variables() {
    let text = "Usage: x <COMMAND>\n\nCommands:\n  serve    Serve\n  help     Print\n\nOptions:\n      \
                --database-url <DATABASE_URL>\n          URL [env: DATABASE_URL] [default: x]\n      \
                --listen <LISTEN>  Where [env: LECTERN_LISTEN=] [default: 1]\n  -h, --help  Print help\n";

    let help = parse_help(text);

    assert_eq!(help.subcommands, BTreeSet::from(["serve".to_owned(), "help".to_owned()]));
    assert_eq!(help.flags, ["--database-url", "--listen", "-h", "--help"].map(str::to_owned).into());
    assert_eq!(help.env, ["DATABASE_URL", "LECTERN_LISTEN"].map(str::to_owned).into());
}
