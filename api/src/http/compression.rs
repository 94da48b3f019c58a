//! Response compression (brotli or gzip) negotiated from `Accept-Encoding` by RFC 9110's
//! rules. poem's own middleware maps `*` to zstd (which we do not offer), picks a coding
//! the client refused with `q=0`, and decompresses request bodies, none of which we want.

use poem::http::header;
use poem::web::{Compress, CompressionAlgo};
use poem::{IntoResponse, Request, Response};

/// Codings offered, best first (brotli is smaller; gzip is everywhere).
const OFFERED: [(&str, CompressionAlgo); 2] = [("br", CompressionAlgo::BR), ("gzip", CompressionAlgo::GZIP)];

/// The coding a response to `request` is compressed with: the best offered one its
/// `Accept-Encoding` accepts; `None` for identity.
pub fn chosen_for(request: &Request) -> Option<CompressionAlgo> {
    let accepted = request
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    negotiate(&accepted)
}

/// `response` compressed with `algorithm`, if any.
pub fn compressed(response: Response, algorithm: Option<CompressionAlgo>) -> Response {
    let mut response = match algorithm {
        Some(algorithm) => Compress::new(response, algorithm).into_response(),
        None => response,
    };
    // Every response here depends on Accept-Encoding, the uncompressed ones too: a
    // cache in between must not hand a compressed body to a client that refused it.
    response.headers_mut().append(header::VARY, header::HeaderValue::from_static("accept-encoding"));
    response
}

/// The offered coding with the highest q-value the header allows (ties: our order);
/// `None` for identity.
fn negotiate(accept_encoding: &str) -> Option<CompressionAlgo> {
    let mut weights: Vec<(String, u32)> = Vec::new();
    for entry in accept_encoding.split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
        let mut parts = entry.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default().to_ascii_lowercase();
        let quality = parts
            .find_map(|parameter| parameter.strip_prefix("q=").or_else(|| parameter.strip_prefix("Q=")))
            .map_or(Some(1000), parse_quality);
        if let Some(quality) = quality {
            weights.push((coding, quality));
        }
    }
    let weight_of = |coding: &str| {
        weights
            .iter()
            .find(|(name, _)| name == coding)
            .or_else(|| weights.iter().find(|(name, _)| name == "*"))
            .map_or(0, |(_, quality)| *quality)
    };
    OFFERED
        .iter()
        .map(|(name, algorithm)| (weight_of(name), *algorithm))
        .filter(|(quality, _)| *quality > 0)
        // max_by_key keeps the last of equals; reversed, that is the first offered.
        .rev()
        .max_by_key(|(quality, _)| *quality)
        .map(|(_, algorithm)| algorithm)
}

/// `q` as thousandths (RFC 9110: 0 to 1, at most three decimals); `None` if malformed.
fn parse_quality(text: &str) -> Option<u32> {
    let value: f32 = text.parse().ok()?;
    (0.0..=1.0).contains(&value).then(|| (value * 1000.0).round() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(header: &str) -> Option<&'static str> {
        negotiate(header).map(|algorithm| match algorithm {
            CompressionAlgo::BR => "br",
            CompressionAlgo::GZIP => "gzip",
            CompressionAlgo::DEFLATE => "deflate",
            CompressionAlgo::ZSTD => "zstd",
        })
    }

    #[test]
    fn the_best_offered_coding_the_client_accepts_is_chosen() {
        assert_eq!(chosen("gzip, deflate, br"), Some("br"));
        assert_eq!(chosen("gzip"), Some("gzip"));
        assert_eq!(chosen("br;q=0.5, gzip;q=0.8"), Some("gzip"));
        assert_eq!(chosen("*"), Some("br"));
        assert_eq!(chosen("zstd, *;q=0.1"), Some("br"));
    }

    #[test]
    fn a_coding_refused_with_q_zero_is_never_chosen() {
        assert_eq!(chosen("gzip;q=0"), None);
        assert_eq!(chosen("*;q=0, gzip"), Some("gzip"));
        assert_eq!(chosen("br;q=0, *"), Some("gzip"));
    }

    #[test]
    fn no_header_unknown_codings_or_junk_mean_no_compression() {
        assert_eq!(chosen(""), None);
        assert_eq!(chosen("identity"), None);
        assert_eq!(chosen("zstd, deflate"), None);
        assert_eq!(chosen("gzip;q=abc"), None);
        assert_eq!(chosen("gzip;q=2"), None);
    }
}
