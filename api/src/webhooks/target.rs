//! Where a delivery may go. A webhook URL is chosen by whoever asks the operator to
//! register it, so by default it must be `https` and reach only public addresses: never
//! this host, the private network, link-local addresses or a cloud's metadata service. The
//! name is checked when the endpoint is registered and again each time a delivery
//! connects ([`GuardedResolver`]), since DNS can answer differently later (rebinding).
//! `LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1` lifts both rules, for receivers on a
//! private network or this machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

/// Why a URL is not a place deliveries may go. A message names the URL by its scheme and
/// host only: it reaches logs and the stored delivery errors, and a path, a query or a
/// user name may carry a receiver's token.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("the URL does not parse: {0}")]
    NotAUrl(#[source] url::ParseError),
    #[error("{0} is not an https URL (plain http is allowed only with LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1)")]
    NotHttps(String),
    #[error("{0} is neither https nor http")]
    Scheme(String),
    #[error("{0} names no host")]
    NoHost(String),
    #[error("{0} carries a user name or password: put credentials in the receiver's check of the signature instead")]
    Credentials(String),
    #[error(
        "{host} resolves to {address}, a {kind} address; deliveries go only to globally reachable addresses \
         unless LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1"
    )]
    Forbidden { host: String, address: IpAddr, kind: &'static str },
    #[error("{host} does not resolve: {source}")]
    Unresolved {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} resolves to no address")]
    NoAddress(String),
}

/// Whether private targets (and plain http) are allowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    pub allow_private: bool,
}

impl TargetPolicy {
    /// `url` parsed and checked, its name resolved and every address it resolves to
    /// checked (at registration).
    pub async fn check(self, url: &str) -> Result<Url, TargetError> {
        let parsed = self.check_form(url)?;
        // An address written in the URL was checked with the form; only a name is looked up
        // (`host_str` of an IPv6 literal is bracketed, which no resolver takes).
        if let (Some(Host::Domain(name)), false) = (parsed.host(), self.allow_private) {
            let port = parsed.port_or_known_default().unwrap_or(443);
            for address in resolve(name, port).await? {
                refuse_if_forbidden(name, address.ip())?;
            }
        }
        Ok(parsed)
    }

    /// The checks that need no lookup: scheme, host, no credentials, and an address
    /// written in the URL (which no resolver sees).
    pub fn check_form(self, url: &str) -> Result<Url, TargetError> {
        let parsed = Url::parse(url).map_err(TargetError::NotAUrl)?;
        let named = origin(&parsed);
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_private => {}
            "http" => return Err(TargetError::NotHttps(named)),
            _ => return Err(TargetError::Scheme(named)),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(TargetError::Credentials(named));
        }
        let literal = match parsed.host() {
            None => return Err(TargetError::NoHost(named)),
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(address)) => Some(IpAddr::V4(address)),
            Some(Host::Ipv6(address)) => Some(IpAddr::V6(address)),
        };
        if let (Some(address), false) = (literal, self.allow_private) {
            refuse_if_forbidden(&host_text(&parsed), address)?;
        }
        Ok(parsed)
    }
}

/// How errors name a URL: its scheme, host and port, never its user, path or query.
pub fn origin(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{}://{host}:{port}", url.scheme()),
        (Some(host), None) => format!("{}://{host}", url.scheme()),
        (None, _) => format!("{}:", url.scheme()),
    }
}

fn host_text(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_owned()
}

async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TargetError> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|source| TargetError::Unresolved { host: host.to_owned(), source })?
        .collect();
    if addresses.is_empty() {
        return Err(TargetError::NoAddress(host.to_owned()));
    }
    Ok(addresses)
}

fn refuse_if_forbidden(host: &str, address: IpAddr) -> Result<(), TargetError> {
    match forbidden(address) {
        Some(kind) => Err(TargetError::Forbidden { host: host.to_owned(), address, kind }),
        None => Ok(()),
    }
}

/// What kind of address that is not globally reachable `address` is, if it is one.
///
/// "Globally reachable" is the column of that name in IANA's IPv4 and IPv6 Special-Purpose
/// Address Registries (what the standard library's unstable `is_global` follows): every
/// block not marked reachable there is refused, whatever it is for. Three kinds are
/// refused although reachable, since a delivery there lands somewhere nobody registered:
/// multicast, the NAT64 prefixes (a gateway reaches the IPv4 address inside, which may be
/// private) and the cloud metadata addresses.
pub fn forbidden(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    }
}

fn forbidden_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = address.octets();
    Some(match () {
        () if address == Ipv4Addr::new(169, 254, 169, 254) || address == Ipv4Addr::new(100, 100, 100, 200) => {
            "cloud metadata"
        }
        () if a == 0 => "\"this network\"",
        () if address.is_loopback() => "loopback",
        () if address.is_private() => "private",
        () if a == 100 && b & 0xc0 == 64 => "shared (carrier-grade NAT)",
        () if address.is_link_local() => "link-local",
        // 192.0.0.0/24 but its two anycast services, .9 and .10, which are reachable.
        () if (a, b, c) == (192, 0, 0) && d != 9 && d != 10 => "IETF protocol assignment",
        () if address.is_documentation() => "documentation",
        () if a == 198 && b & 0xfe == 18 => "benchmarking",
        () if (a, b, c) == (192, 88, 99) => "deprecated 6to4 relay anycast",
        () if address.is_multicast() => "multicast",
        // 240.0.0.0/4, the limited broadcast address included.
        () if a >= 240 => "reserved",
        () => return None,
    })
}

fn forbidden_v6(address: Ipv6Addr) -> Option<&'static str> {
    let segments = address.segments();
    let [first, second, ..] = segments;
    Some(match () {
        () if address == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => "cloud metadata",
        () if address.is_unspecified() => "unspecified",
        () if address.is_loopback() => "loopback",
        () if segments[..6] == [0; 6] => "IPv4-compatible (deprecated)",
        // 64:ff9b::/96 and 64:ff9b:1::/48.
        () if (first, second) == (0x64, 0xff9b) => "NAT64",
        () if segments[..4] == [0x100, 0, 0, 0] => "discard-only",
        () if first == 0x2001 && second < 0x200 && !reachable_ietf_assignment(address) => "IETF protocol assignment",
        () if first == 0x2002 => "6to4",
        () if (first, second) == (0x2001, 0xdb8) || first & 0xfff0 == 0x3ff0 => "documentation",
        () if first & 0xfe00 == 0xfc00 => "private (unique local)",
        () if first & 0xffc0 == 0xfe80 => "link-local",
        () if first & 0xffc0 == 0xfec0 => "site-local (deprecated)",
        () if address.is_multicast() => "multicast",
        () => return None,
    })
}

/// The blocks inside 2001::/23 (IETF protocol assignments) that the registry marks
/// globally reachable: anycast services, AMT, AS112 and the ORCHIDv2 and DET prefixes.
fn reachable_ietf_assignment(address: Ipv6Addr) -> bool {
    let [_, second, third, ..] = address.segments();
    let anycast = (0x2001_0001_u128 << 96) | 1..=(0x2001_0001_u128 << 96) | 3;
    anycast.contains(&u128::from(address))
        || second == 3
        || (second, third) == (4, 0x112)
        || (0x20..=0x3f).contains(&second)
}

/// The resolver deliveries connect through: the system's, with every non-public
/// address dropped unless private targets are allowed; a name left with none fails.
#[derive(Debug, Default)]
pub struct GuardedResolver {
    pub policy: TargetPolicy,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addresses = resolve(&host, 0).await?;
            let mut refused = None;
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| match (policy.allow_private, forbidden(address.ip())) {
                    (false, Some(kind)) => {
                        refused = Some(TargetError::Forbidden { host: host.clone(), address: address.ip(), kind });
                        false
                    }
                    _ => true,
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(refused)) => Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>),
                (true, None) => Err(Box::new(TargetError::NoAddress(host)) as Box<dyn std::error::Error + Send + Sync>),
                (false, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_private_link_local_and_metadata_addresses_are_refused_and_public_ones_are_not() {
        for (address, kind) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fc00::1", "private (unique local)"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("0.0.0.0", "\"this network\""),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
        ] {
            assert_eq!(forbidden(address.parse().expect("address")), Some(kind), "{address}");
        }
        for address in ["1.1.1.1", "93.184.215.14", "2606:4700:4700::1111"] {
            assert_eq!(forbidden(address.parse().expect("address")), None, "{address}");
        }
    }

    /// Rule: an address is refused unless IANA's special-purpose registries mark its block
    /// globally reachable, every such block named, not only the familiar private ones.
    #[test]
    fn every_block_the_special_purpose_registries_do_not_mark_globally_reachable_is_refused() {
        for (address, kind) in [
            ("0.1.2.3", "\"this network\""),
            ("192.0.0.1", "IETF protocol assignment"),
            ("192.0.0.170", "IETF protocol assignment"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.19.255.1", "benchmarking"),
            ("192.88.99.1", "deprecated 6to4 relay anycast"),
            ("224.0.0.251", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "reserved"),
            ("::ffff:192.0.0.8", "IETF protocol assignment"),
            ("::10.0.0.1", "IPv4-compatible (deprecated)"),
            ("64:ff9b::a00:1", "NAT64"),
            ("64:ff9b:1::1", "NAT64"),
            ("100::1", "discard-only"),
            ("2001::1", "IETF protocol assignment"),
            ("2001:2::1", "IETF protocol assignment"),
            ("2001:10::1", "IETF protocol assignment"),
            ("2002:a00:1::1", "6to4"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("fec0::1", "site-local (deprecated)"),
            ("ff02::1", "multicast"),
        ] {
            assert_eq!(forbidden(address.parse().expect("address")), Some(kind), "{address}");
        }
        // The registry's reachable blocks inside refused ones, and ordinary public space.
        for address in [
            "192.0.0.9",
            "192.0.0.10",
            "192.31.196.1",
            "192.175.48.1",
            "2001:1::1",
            "2001:1::2",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:3f::1",
            "2a00:1450:4001::200e",
            "8.8.8.8",
        ] {
            assert_eq!(forbidden(address.parse().expect("address")), None, "{address}");
        }
    }

    /// Rule: a URL naming an IPv6 address literally is checked as an address, never looked
    /// up as a name (its bracketed host resolves to nothing).
    #[tokio::test]
    async fn a_url_with_a_literal_ipv6_address_is_checked_as_the_address_it_names() {
        let strict = TargetPolicy::default();
        let public = strict.check("https://[2606:4700:4700::1111]:8443/hook?x=1").await;
        assert!(public.is_ok(), "{public:?}");
        let refused = strict.check("https://[fd12::1]/hook").await;
        assert!(matches!(refused, Err(TargetError::Forbidden { kind: "private (unique local)", .. })), "{refused:?}");
        let v4 = strict.check("https://192.0.0.8/hook").await;
        assert!(matches!(v4, Err(TargetError::Forbidden { kind: "IETF protocol assignment", .. })), "{v4:?}");
    }

    #[test]
    fn only_https_urls_without_credentials_pass_unless_private_targets_are_allowed() {
        let strict = TargetPolicy::default();
        assert!(matches!(strict.check_form("http://example.com/hook"), Err(TargetError::NotHttps(_))));
        assert!(matches!(strict.check_form("ftp://example.com/hook"), Err(TargetError::Scheme(_))));
        assert!(matches!(strict.check_form("https://user:pw@example.com/"), Err(TargetError::Credentials(_))));
        assert!(matches!(strict.check_form("https://127.0.0.1/"), Err(TargetError::Forbidden { .. })));
        assert!(matches!(strict.check_form("https://[::1]:8443/"), Err(TargetError::Forbidden { .. })));
        assert!(strict.check_form("https://example.com/hook").is_ok());
        let leaked = strict.check_form("http://user:hunter2@example.com/hook/tok3n?key=s3cret").expect_err("refused");
        let message = leaked.to_string();
        assert!(message.contains("http://example.com"), "{message}");
        for secret in ["hunter2", "tok3n", "s3cret", "user"] {
            assert!(!message.contains(secret), "the refusal repeats {secret:?}: {message}");
        }
        let open = TargetPolicy { allow_private: true };
        assert!(open.check_form("http://127.0.0.1:9000/hook").is_ok());
        assert!(matches!(open.check_form("ftp://127.0.0.1/"), Err(TargetError::Scheme(_))));
    }
}
