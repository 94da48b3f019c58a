//! The operations files as data: compose.yaml (services, their command lines,
//! environments, ports, health checks), `${VAR}` interpolation, and .env.example.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

/// The image every Lectern service runs (built once from the Dockerfile).
pub const LECTERN_IMAGE: &str = "lectern:local";
/// The binaries the image holds.
pub const LECTERN_BINARIES: [&str; 3] = ["lectern-api", "lectern-projector", "lectern-dev"];

/// The workspace root (the directory holding compose.yaml).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// A file of the workspace root, read whole.
pub fn read(name: &str) -> String {
    let path = root().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// compose.yaml, parsed.
pub fn compose() -> Compose {
    let document: Value = serde_yaml::from_str(&read("compose.yaml")).expect("compose.yaml is valid YAML");
    Compose { document }
}

/// compose.yaml as parsed YAML, with the questions the tests ask of it.
pub struct Compose {
    pub document: Value,
}

impl Compose {
    /// Every service, by name.
    pub fn services(&self) -> BTreeMap<String, Service<'_>> {
        let services = self.document["services"].as_mapping().expect("compose.yaml has a services mapping");
        services
            .iter()
            .map(|(name, value)| {
                let name = name.as_str().expect("service names are strings");
                (name.to_owned(), Service { name, value })
            })
            .collect()
    }

    /// The service `name`; the test fails if there is none.
    pub fn service(&self, name: &str) -> Service<'_> {
        self.services().remove(name).unwrap_or_else(|| panic!("compose.yaml has no service {name:?}"))
    }

    /// The services that run the Lectern image.
    pub fn lectern_services(&self) -> Vec<Service<'_>> {
        self.services().into_values().filter(Service::is_lectern).collect()
    }

    /// The names under the top-level `volumes` key.
    pub fn declared_volumes(&self) -> Vec<String> {
        self.document["volumes"]
            .as_mapping()
            .map(|volumes| volumes.keys().filter_map(|name| name.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// Every string in the document (keys and values), where compose interpolates.
    pub fn strings(&self) -> Vec<String> {
        let mut strings = Vec::new();
        collect_strings(&self.document, &mut strings);
        strings
    }
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Sequence(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Value::Mapping(mapping) => mapping.iter().for_each(|(key, value)| {
            collect_strings(key, out);
            collect_strings(value, out);
        }),
        Value::Tagged(tagged) => collect_strings(&tagged.value, out),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// One service of compose.yaml.
#[derive(Clone, Copy)]
pub struct Service<'a> {
    pub name: &'a str,
    pub value: &'a Value,
}

impl<'a> Service<'a> {
    pub fn image(&self) -> Option<&'a str> {
        self.value["image"].as_str()
    }

    pub fn is_lectern(&self) -> bool {
        self.image() == Some(LECTERN_IMAGE)
    }

    /// The process the container starts: entrypoint, then command (list form only).
    pub fn argv(&self) -> Vec<String> {
        let mut argv = self.list("entrypoint");
        argv.extend(self.list("command"));
        argv
    }

    /// A key holding a list of strings (compose's exec form); empty when absent.
    pub fn list(&self, key: &str) -> Vec<String> {
        match &self.value[key] {
            Value::Null => Vec::new(),
            Value::Sequence(items) => items.iter().map(scalar).collect(),
            other => panic!("{}.{key} must be a list (exec form, no shell in the image), not {other:?}", self.name),
        }
    }

    /// The `environment`, mapping or `NAME=value` list alike.
    pub fn environment(&self) -> BTreeMap<String, String> {
        match &self.value["environment"] {
            Value::Null => BTreeMap::new(),
            Value::Mapping(mapping) => mapping
                .iter()
                .map(|(name, value)| (scalar(name), if value.is_null() { String::new() } else { scalar(value) }))
                .collect(),
            Value::Sequence(items) => items
                .iter()
                .map(|item| {
                    let item = scalar(item);
                    let (name, value) = item.split_once('=').unwrap_or((&item, ""));
                    (name.to_owned(), value.to_owned())
                })
                .collect(),
            other => panic!("{}.environment must be a mapping or a list, not {other:?}", self.name),
        }
    }

    /// The health check's command without its `CMD` marker; `None` without one.
    pub fn healthcheck(&self) -> Option<Vec<String>> {
        let test = &self.value["healthcheck"]["test"];
        if test.is_null() {
            return None;
        }
        let mut argv: Vec<String> = test
            .as_sequence()
            .unwrap_or_else(|| panic!("{}'s healthcheck test must be a list", self.name))
            .iter()
            .map(scalar)
            .collect();
        assert_eq!(
            argv.first().map(String::as_str),
            Some("CMD"),
            "{}'s healthcheck must be [\"CMD\", ...]: the image has no shell for CMD-SHELL",
            self.name
        );
        argv.remove(0);
        Some(argv)
    }

    /// `depends_on` as service → condition (`service_started` for the list form).
    pub fn depends_on(&self) -> BTreeMap<String, String> {
        match &self.value["depends_on"] {
            Value::Null => BTreeMap::new(),
            Value::Sequence(names) => names.iter().map(|name| (scalar(name), "service_started".to_owned())).collect(),
            Value::Mapping(mapping) => mapping
                .iter()
                .map(|(name, options)| {
                    let condition = options["condition"].as_str().unwrap_or("service_started");
                    (scalar(name), condition.to_owned())
                })
                .collect(),
            other => panic!("{}.depends_on must be a list or a mapping, not {other:?}", self.name),
        }
    }

    /// Published ports, short (`[ip:][host:]container[/proto]`) or long syntax.
    pub fn ports(&self) -> Vec<PublishedPort> {
        let Some(ports) = self.value["ports"].as_sequence() else { return Vec::new() };
        ports
            .iter()
            .map(|port| match port {
                Value::Mapping(_) => PublishedPort {
                    host_ip: port["host_ip"].as_str().map(str::to_owned),
                    published: (!port["published"].is_null()).then(|| scalar(&port["published"])),
                    target: scalar(&port["target"]).parse().expect("target is a port number"),
                },
                short => PublishedPort::parse(&scalar(short)),
            })
            .collect()
    }

    /// Named volumes this service mounts, with the path inside the container.
    pub fn named_volumes(&self) -> Vec<(String, String)> {
        self.mounts("volume")
    }

    /// Files and directories of the host this service mounts (bind mounts), with the path
    /// inside the container.
    pub fn bind_mounts(&self) -> Vec<(String, String)> {
        self.mounts("bind")
    }

    /// Mounts of `kind` (`volume` or `bind`), long syntax or short.
    fn mounts(&self, kind: &str) -> Vec<(String, String)> {
        let Some(volumes) = self.value["volumes"].as_sequence() else { return Vec::new() };
        volumes
            .iter()
            .filter_map(|volume| match volume {
                Value::Mapping(_) if volume["type"].as_str() == Some(kind) => {
                    Some((scalar(&volume["source"]), scalar(&volume["target"])))
                }
                Value::Mapping(_) => None,
                short => {
                    let short = scalar(short);
                    let mut parts = short.split(':');
                    let source = parts.next().unwrap_or_default().to_owned();
                    let target = parts.next().unwrap_or_default().to_owned();
                    // Bind mounts start with a path; named volumes with a name.
                    let bind = source.starts_with(['.', '/', '~', '$']);
                    (bind == (kind == "bind")).then_some((source, target))
                }
            })
            .collect()
    }
}

/// A YAML scalar as compose reads it (strings, numbers and booleans alike).
pub fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        other => panic!("expected a scalar, found {other:?}"),
    }
}

/// One entry of a service's `ports`.
#[derive(Debug)]
pub struct PublishedPort {
    /// The host address it is published on; `None` is every interface.
    pub host_ip: Option<String>,
    pub published: Option<String>,
    pub target: u16,
}

impl PublishedPort {
    fn parse(short: &str) -> Self {
        let short = short.split('/').next().unwrap_or_default();
        let parts: Vec<&str> = short.rsplitn(3, ':').collect();
        let target = parts[0].parse().unwrap_or_else(|_| panic!("{short:?}: the container port must be a number"));
        Self {
            published: parts.get(1).map(|&port| port.to_owned()),
            host_ip: parts.get(2).map(|&ip| ip.trim_matches(['[', ']']).to_owned()),
            target,
        }
    }

    pub fn is_loopback_only(&self) -> bool {
        self.host_ip.as_deref().and_then(|ip| ip.parse::<std::net::IpAddr>().ok()).is_some_and(|ip| ip.is_loopback())
    }
}

/// The port of a `host:port` listen address.
pub fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("{address:?} is not a host:port address"))
}

/// An `http://host:port/path` URL taken apart: (host, port, path).
pub fn http_url(url: &str) -> (String, u16, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("{url:?} is not an http:// URL"));
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    let (host, port) = authority.rsplit_once(':').unwrap_or_else(|| panic!("{url:?} names no port"));
    (host.to_owned(), port.parse().unwrap_or_else(|_| panic!("{url:?}: bad port")), path.to_owned())
}

/// One `$NAME` or `${NAME...}` in a string compose interpolates.
#[derive(Debug, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    /// `:?`, `?`, `:-`, `-`, `:+`, `+`, or empty for a plain `${NAME}`/`$NAME`.
    pub operator: String,
    /// The message or default after the operator.
    pub argument: String,
    /// Byte range of the whole reference in the string.
    pub span: std::ops::Range<usize>,
}

impl Reference {
    /// `${NAME:?message}`: compose refuses to start when NAME is unset or empty.
    pub fn is_required(&self) -> bool {
        self.operator == ":?"
    }
}

/// The references in `text` (`$$` is a literal dollar, not a reference).
pub fn references(text: &str) -> Vec<Reference> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'$' {
            at += 1;
            continue;
        }
        match bytes.get(at + 1) {
            Some(b'$') => at += 2,
            Some(b'{') => {
                let end = text[at..]
                    .find('}')
                    .map(|offset| at + offset)
                    .unwrap_or_else(|| panic!("unclosed ${{ in {text:?}"));
                let inner = &text[at + 2..end];
                let name_len = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(inner.len());
                let (name, rest) = inner.split_at(name_len);
                let operator_len = [":?", ":-", ":+", "?", "-", "+"]
                    .iter()
                    .find(|operator| rest.starts_with(*operator))
                    .map_or(0, |operator| operator.len());
                assert!(rest.is_empty() || operator_len > 0, "unknown interpolation {:?}", &text[at..=end]);
                found.push(Reference {
                    name: name.to_owned(),
                    operator: rest[..operator_len].to_owned(),
                    argument: rest[operator_len..].to_owned(),
                    span: at..end + 1,
                });
                at = end + 1;
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                let len = text[at + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(text.len() - at - 1);
                found.push(Reference {
                    name: text[at + 1..at + 1 + len].to_owned(),
                    operator: String::new(),
                    argument: String::new(),
                    span: at..at + 1 + len,
                });
                at += 1 + len;
            }
            _ => at += 1,
        }
    }
    found
}

/// `text` with every reference replaced by its value in `variables`, as compose would.
pub fn interpolate(text: &str, variables: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut last = 0;
    for reference in references(text) {
        out.push_str(&text[last..reference.span.start].replace("$$", "$"));
        let value = variables.get(&reference.name).filter(|value| !value.is_empty());
        let replacement = match (reference.operator.as_str(), value) {
            (":-" | "-", None) => reference.argument.clone(),
            (":+" | "+", Some(_)) => reference.argument.clone(),
            (":+" | "+", None) => String::new(),
            (":?" | "?", None) => panic!("compose would refuse: {}", reference.argument),
            (_, value) => value.cloned().unwrap_or_default(),
        };
        out.push_str(&replacement);
        last = reference.span.end;
    }
    out.push_str(&text[last..].replace("$$", "$"));
    out
}

/// The variables .env.example defines, with their placeholder values.
pub fn env_example() -> BTreeMap<String, String> {
    read(".env.example")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, value) =
                line.split_once('=').unwrap_or_else(|| panic!(".env.example: {line:?} is not NAME=value"));
            (name.trim().to_owned(), value.trim().trim_matches(['"', '\'']).to_owned())
        })
        .collect()
}

/// Names that hold secrets, whatever service they belong to.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    ["PASSWORD", "SECRET", "PEPPER", "TOKEN"].iter().any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_with_their_operator_and_dollar_dollar_is_literal() {
        let found = references("a ${A:?set A} $B $$C ${D:-x} ${E}");
        let names: Vec<(&str, &str)> = found.iter().map(|r| (r.name.as_str(), r.operator.as_str())).collect();
        assert_eq!(names, [("A", ":?"), ("B", ""), ("D", ":-"), ("E", "")]);
        assert_eq!(found[0].argument, "set A");
    }

    #[test]
    fn short_port_syntax_is_taken_apart_from_the_right() {
        let port = PublishedPort::parse("127.0.0.1:8080:80");
        assert_eq!(
            (port.host_ip.as_deref(), port.published.as_deref(), port.target),
            (Some("127.0.0.1"), Some("8080"), 80)
        );
        let port = PublishedPort::parse("8080:80/tcp");
        assert_eq!((port.host_ip, port.published.as_deref(), port.target), (None, Some("8080"), 80));
        assert!(!PublishedPort::parse("80").is_loopback_only());
    }
}
