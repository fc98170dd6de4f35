//! An e-mail's readable text (RFC 5322 message, MIME of RFC 2045–2049): the SpamAssassin
//! corpus of `engram data fetch spam-assassin` holds raw messages, and a classifier trained on
//! their raw bytes learns the MIME debris (boundaries, base64 lines, `=3D`) as the cue for
//! spam. [`email_text`] decodes them with Stalwart Labs' `mail-parser` crate: multipart
//! structure, quoted-printable and base64 transfer encodings, the charsets the parts declare
//! (ISO-8859-*, Windows-125x, KOI8, and through `encoding_rs` Big5, GB2312, EUC-KR …), encoded
//! words; the headers are dropped.

use mail_parser::decoders::base64::base64_decode;
use mail_parser::decoders::charsets::map::charset_decoder;
use mail_parser::decoders::html::html_to_text;
use mail_parser::decoders::quoted_printable::quoted_printable_decode;
use mail_parser::{Encoding, MessageParser, MessagePart, MimeHeaders, PartType};

/// The text of the message `raw`: its text bodies (text/plain where a part offers one, else
/// its text/html converted to text, tags dropped and entities decoded; a text/plain part that
/// [`looks_like_html`] converted too), joined by a blank line,
/// with [`tidy`]'s white space; when they hold no text, its HTML bodies, then any text or HTML
/// part (an HTML page sent as the only part of a multipart/mixed message), each decoded as
/// [`own_decoding`] says where the parser left it as it is. `None` when no part holds more
/// than white space.
pub fn email_text(raw: &[u8]) -> Option<String> {
    let msg = MessageParser::default().parse(raw)?;
    let every: Vec<u32> = (0..msg.parts.len() as u32).collect();
    [&msg.text_body, &msg.html_body, &every]
        .into_iter()
        .map(|ids| {
            let texts: Vec<String> = ids
                .iter()
                .filter_map(|&id| msg.parts.get(id as usize))
                .filter_map(|part| part_text(part, raw))
                .collect();
            tidy(&texts.join("\n\n"))
        })
        .find(|t| !t.is_empty())
}

/// A text or HTML part's text (HTML, or text that [`looks_like_html`], converted), decoded by
/// [`own_decoding`] where the parser left it undecoded; `None` for other parts.
fn part_text(part: &MessagePart<'_>, raw: &[u8]) -> Option<String> {
    let parsed = match &part.body {
        PartType::Text(t) | PartType::Html(t) => t,
        _ => return None,
    };
    let html = matches!(part.body, PartType::Html(_))
        || part
            .content_type()
            .and_then(|ct| ct.subtype())
            .is_some_and(|s| s.eq_ignore_ascii_case("html"));
    let text = own_decoding(part, raw).unwrap_or_else(|| parsed.to_string());
    Some(if html || looks_like_html(&text) {
        html_to_text(&text)
    } else {
        text
    })
}

/// A part's body decoded here where the parser left it as it is (`part.encoding` none):
/// - a part that names base64 or quoted-printable but that the parser did not decode (a
///   multipart message cut off before its closing boundary, as 20 of SpamAssassin's are: the
///   parser keeps the last part raw; a base64 part with a mailing list's footer appended) is
///   decoded (base64: up to its first line that is not base64), then read in its declared
///   charset (UTF-8, or ISO-8859-1 where that fails, without one);
/// - a part sent as it is that declares no charset and is not valid UTF-8 is read as
///   ISO-8859-1 (each byte the code point of its value: what the 2002 mailers sent).
///
/// `None` when the parser's decoding stands.
fn own_decoding(part: &MessagePart<'_>, raw: &[u8]) -> Option<String> {
    if part.encoding != Encoding::None {
        return None;
    }
    let body = raw.get(part.offset_body as usize..part.offset_end as usize)?;
    let charset = part.content_type().and_then(|ct| ct.attribute("charset"));
    let cte = part
        .content_transfer_encoding()
        .map(|c| c.trim().to_ascii_lowercase());
    let bytes = match cte.as_deref() {
        Some("base64") => base64_decode(&base64_lines(body))?,
        Some("quoted-printable") => quoted_printable_decode(body)?,
        _ if charset.is_some() || std::str::from_utf8(body).is_ok() => return None,
        _ => return Some(latin1(body)),
    };
    Some(match charset.and_then(|c| charset_decoder(c.as_bytes())) {
        Some(decode) => decode(&bytes),
        None => String::from_utf8(bytes).unwrap_or_else(|e| latin1(e.as_bytes())),
    })
}

/// The base64 text of `body`: its lines up to the first that is not base64 (a mailing list's
/// footer appended to a base64 part), white space removed.
fn base64_lines(body: &[u8]) -> Vec<u8> {
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    body.split(|&b| b == b'\n')
        .map(|l| l.trim_ascii())
        .skip_while(|l| l.is_empty())
        .take_while(|l| l.iter().all(base64))
        .flatten()
        .copied()
        .collect()
}

/// `bytes` as ISO-8859-1: each byte the code point of its value.
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// Whether a text/plain body is an HTML page sent as text (it has an `<html` or `<body` tag, in
/// any case): such bodies are converted as HTML, so that the markup of a mislabelled part is
/// no cue either.
pub fn looks_like_html(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("<html") || lower.contains("<body")
}

/// White space made plain: `\r\n` and `\r` become `\n`, no-break spaces spaces, each line
/// loses its trailing white space, runs of blank lines become one, and blank lines at either
/// end are dropped (a first line keeps its indent).
pub fn tidy(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace(['\r'], "\n");
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.replace('\u{a0}', " ");
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}
