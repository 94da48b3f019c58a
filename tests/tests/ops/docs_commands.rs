//! The operations guide against the command lines as clap describes them: every command and
//! subcommand of both binaries is in the binaries table, and every flag of `lectern-api
//! serve` and `lectern-projector run` has a row in its configuration table, with the
//! variable `--help` names and the default `--help` shows.

use std::path::Path;

/// The guide's text.
fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// The row of the binaries table for `binary`.
fn binaries_row<'a>(guide: &'a str, binary: &str) -> &'a str {
    guide
        .lines()
        .find(|line| line.starts_with(&format!("| `{binary}` |")))
        .unwrap_or_else(|| panic!("the binaries table has no row for {binary}"))
}

/// Every command of `command`, as `parent child` for nested ones.
fn commands(command: &clap::Command) -> Vec<Vec<String>> {
    command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .flat_map(|sub| {
            let nested: Vec<Vec<String>> = commands(sub);
            if nested.is_empty() {
                vec![vec![sub.get_name().to_owned()]]
            } else {
                nested
                    .into_iter()
                    .map(|mut path| {
                        path.insert(0, sub.get_name().to_owned());
                        path
                    })
                    .collect()
            }
        })
        .collect()
}

/// The table of the guide's section `heading`, one row per line.
fn table_under<'a>(guide: &'a str, heading: &str) -> Vec<&'a str> {
    let start = guide.find(heading).unwrap_or_else(|| panic!("the guide has no section {heading}"));
    guide[start..]
        .lines()
        .skip(1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .collect()
}

/// Rule: no command of either binary is missing from the guide's binaries table (a nested
/// one is there with its parent's name before it, as `keys create / list / revoke`).
#[test]
fn every_command_of_both_binaries_is_in_the_binaries_table() {
    let guide = guide();
    let mut missing = Vec::new();
    for (binary, command) in
        [("lectern-api", lectern_api::cli::command()), ("lectern-projector", lectern_projector::cli::command())]
    {
        let row = binaries_row(&guide, binary);
        for path in commands(&command) {
            let named = match &path[..] {
                [single] => row.contains(&format!("`{single}`")) || row.contains(&format!("`{single} ")),
                [parent, child] => {
                    let start = row.find(&format!("`{parent} ")).map(|at| &row[at..]);
                    start
                        .and_then(|rest| rest.split('`').nth(1))
                        .is_some_and(|listed| listed.split([' ', '/']).any(|word| word == child.as_str()))
                }
                _ => false,
            };
            if !named {
                missing.push(format!("{binary} {}", path.join(" ")));
            }
        }
    }
    assert!(missing.is_empty(), "commands missing from the binaries table: {missing:?}");
}

/// Rule: each flag of `lectern-api serve` and `lectern-projector run` has a row naming the
/// flag, the environment variable `--help` names, and the default `--help` shows.
#[test]
fn every_flag_of_serve_and_run_is_in_its_configuration_table_with_its_variable_and_default() {
    let guide = guide();
    let mut disagreements = Vec::new();
    for (heading, command, sub) in [
        ("### `lectern-api serve`", lectern_api::cli::command(), "serve"),
        ("### `lectern-projector run`", lectern_projector::cli::command(), "run"),
    ] {
        let rows = table_under(&guide, heading);
        let sub = command.find_subcommand(sub).unwrap_or_else(|| panic!("no {sub} command"));
        for argument in sub.get_arguments().filter(|argument| !argument.is_hide_set()) {
            let Some(long) = argument.get_long() else { continue };
            if ["help", "version"].contains(&long) {
                continue;
            }
            let Some(row) = rows.iter().find(|row| row.starts_with(&format!("| `--{long}` |"))) else {
                disagreements.push(format!("{heading}: no row for --{long}"));
                continue;
            };
            let columns: Vec<&str> = row.split(" | ").collect();
            if let Some(env) = argument.get_env() {
                let env = env.to_string_lossy();
                if columns.get(1).is_none_or(|column| *column != format!("`{env}`")) {
                    disagreements
                        .push(format!("{heading}: --{long}'s variable is {env}, the guide says {:?}", columns.get(1)));
                }
            }
            for default in argument.get_default_values() {
                let default = default.to_string_lossy();
                if columns.get(2).is_none_or(|column| !column.contains(&format!("`{default}`"))) {
                    disagreements.push(format!(
                        "{heading}: --{long} defaults to {default}, the guide says {:?}",
                        columns.get(2)
                    ));
                }
            }
        }
    }
    assert!(disagreements.is_empty(), "the guide and --help disagree:\n{}", disagreements.join("\n"));
}
