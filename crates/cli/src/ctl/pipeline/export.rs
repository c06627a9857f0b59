//! `pipeline export`: the archive, for external systems, as JSON lines in archive order — one
//! archived transaction each, its documents embedded — from a stream opened again after it
//! breaks, resumable from the cursor of any line.

use std::io::Write;

use certus_client::{Client, ClientError};
use certus_proto::v1::{ArchiveCursor, ArchivedTransaction};
use serde_json::json;

use super::args::ExportArgs;
use super::render::status_text;
use crate::ctl::failed;
use crate::ctl::show::{ms_or_null, text_or_null};
use crate::limits::PIPELINE_EXPORT_REOPENS_MAX;

/// How many lines `pipeline export` writes between flushes; the cursor it reports on a write
/// error is the last one flushed.
const EXPORT_FLUSH_LINES: u64 = 256;

/// `pipeline export`.
pub(super) async fn run(client: &Client, args: ExportArgs) -> Result<(), String> {
    let what = "pipeline export";
    let to_stdout = args.output.as_os_str() == "-";
    let sink: Box<dyn Write + Send> = if to_stdout {
        Box::new(std::io::stdout())
    } else {
        let file = std::fs::File::create(&args.output)
            .map_err(|error| format!("{what}: cannot create {}: {error}", args.output.display()))?;
        Box::new(file)
    };
    let mut out = std::io::BufWriter::new(sink);
    let destination = if to_stdout {
        "stdout".to_owned()
    } else {
        args.output.display().to_string()
    };
    // The cursor after the last line handed to `out`, and after the last one flushed.
    let mut cursor = args.after;
    let mut flushed = args.after;
    let mut written: u64 = 0;
    let mut reopens: u32 = 0;
    let write_failed = |error: std::io::Error, flushed: Option<ArchiveCursor>| {
        format!(
            "{what}: cannot write to {destination}: {error}; {}",
            resume_hint(flushed)
        )
    };
    loop {
        let left = u64::from(args.limit) - written;
        if left == 0 {
            break;
        }
        let opened = client
            .export_archive(cursor, u32::try_from(left).unwrap_or(u32::MAX))
            .await;
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) if written == 0 => return Err(failed(what, &error)),
            Err(error) => {
                out.flush().map_err(|error| write_failed(error, flushed))?;
                return Err(format!("{}; {}", failed(what, &error), resume_hint(cursor)));
            }
        };
        let broken = loop {
            match stream.message().await {
                Ok(Some(item)) => {
                    reopens = 0;
                    let line = archive_line(&item)?;
                    writeln!(out, "{line}").map_err(|error| write_failed(error, flushed))?;
                    cursor = item.cursor;
                    written += 1;
                    if written.is_multiple_of(EXPORT_FLUSH_LINES) {
                        out.flush().map_err(|error| write_failed(error, flushed))?;
                        flushed = cursor;
                    }
                }
                Ok(None) => break None,
                Err(status) => break Some(ClientError::from_status(&status).to_string()),
            }
        };
        let Some(broken) = broken else {
            break;
        };
        reopens += 1;
        if reopens > PIPELINE_EXPORT_REOPENS_MAX {
            out.flush().map_err(|error| write_failed(error, flushed))?;
            return Err(format!(
                "{what}: {broken} ({PIPELINE_EXPORT_REOPENS_MAX} reopens failed); {}",
                resume_hint(cursor)
            ));
        }
        eprintln!("{what}: {broken}; resuming {}", after_text(cursor));
    }
    out.flush().map_err(|error| write_failed(error, flushed))?;
    eprintln!(
        "{what}: wrote {written} archived transaction(s) to {destination}; {}",
        resume_hint(cursor)
    );
    Ok(())
}

/// Parses `ARCHIVED_AT_MS:ID` (what the export prints and each line's `cursor` holds).
pub(super) fn parse_cursor(text: &str) -> Result<ArchiveCursor, String> {
    let expected = "expected ARCHIVED_AT_MS:ID, two decimal numbers (the cursor an export \
                    printed, or TIME_MS:0 to start at a time)";
    let (at, id) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: {expected}"))?;
    let number = |part: &str| {
        // `u64::from_str` takes a leading `+`; a cursor is digits only.
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?}: {expected}"));
        }
        part.parse::<u64>()
            .map_err(|error| format!("{text:?}: {error}; {expected}"))
    };
    Ok(ArchiveCursor {
        archived_at_ms: number(at)?,
        transaction_id: number(id)?,
    })
}

fn cursor_text(cursor: &ArchiveCursor) -> String {
    format!("{}:{}", cursor.archived_at_ms, cursor.transaction_id)
}

fn after_text(cursor: Option<ArchiveCursor>) -> String {
    match cursor {
        Some(cursor) => format!("after {}", cursor_text(&cursor)),
        None => "from the oldest".to_owned(),
    }
}

/// How to go on from `cursor`.
fn resume_hint(cursor: Option<ArchiveCursor>) -> String {
    match cursor {
        Some(cursor) => format!("resume with --after {}", cursor_text(&cursor)),
        None => "nothing was written; run it again without --after".to_owned(),
    }
}

/// A stored JSON document on one line: its text with the whitespace between tokens removed.
/// Strings, numbers and the order of keys stay as stored, so nothing is reformatted or loses
/// precision (a JSON string holds no raw line break, so the result is one line).
fn compact_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// One line of `pipeline export` (docs/pipelines.md, "Archive export"): a JSON object with
/// its fields in a fixed order, JSON documents embedded as JSON (compacted), absent values
/// null.
fn archive_line(item: &ArchivedTransaction) -> Result<String, String> {
    let (Some(tx), Some(cursor)) = (&item.transaction, &item.cursor) else {
        return Err(format!(
            "pipeline export: the node sent an item without a transaction or cursor: {item:?}"
        ));
    };
    let metadata = tx.metadata.clone().unwrap_or_default();
    let document = |text: &str| {
        if text.is_empty() {
            "null".to_owned()
        } else {
            compact_json(text)
        }
    };
    let fields: [(&str, String); 19] = [
        ("cursor", json!(cursor_text(cursor)).to_string()),
        ("id", tx.id.to_string()),
        ("pipeline", text_or_null(&tx.pipeline).to_string()),
        ("node_group", json!(tx.node_group).to_string()),
        ("owner", json!(tx.owner).to_string()),
        ("external_id", text_or_null(&tx.external_id).to_string()),
        ("status", json!(status_text(tx.status)).to_string()),
        ("state", document(&tx.state)),
        ("event", document(&tx.event)),
        ("progress", document(&tx.progress)),
        (
            "metadata",
            format!(
                r#"{{"webhook_url":{},"progress_reports":{},"cancel_webhook_on_longpoll":{}}}"#,
                text_or_null(&metadata.webhook_url),
                metadata.progress_reports,
                metadata.cancel_webhook_on_longpoll,
            ),
        ),
        ("cancel_requested", tx.cancel_requested.to_string()),
        ("attempts", tx.attempts.to_string()),
        ("created_at_ms", tx.created_at_ms.to_string()),
        (
            "last_started_at_ms",
            ms_or_null(tx.last_started_at_ms).to_string(),
        ),
        (
            "completed_at_ms",
            ms_or_null(tx.completed_at_ms).to_string(),
        ),
        ("notified_at_ms", ms_or_null(tx.notified_at_ms).to_string()),
        ("archived_at_ms", tx.archived_at_ms.to_string()),
        ("version", tx.version.to_string()),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("\"{name}\":{value}"))
        .collect();
    Ok(format!("{{{}}}", body.join(",")))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use certus_client::{Transaction, TxMetadata, TxStatus};
    use serde_json::Value;

    use super::*;
    use crate::ctl::pipeline::args::{ExportArgs, PipelineCommand};
    use crate::ctl::pipeline::testing::{parse, parse_error, transaction};

    #[test]
    fn export_takes_a_cursor_a_bounded_limit_and_an_output() {
        let PipelineCommand::Export(ExportArgs {
            after,
            limit,
            output,
        }) = parse(&["export"])
        else {
            panic!("export");
        };
        assert_eq!((after, limit), (None, 1_000_000));
        assert_eq!(output, PathBuf::from("-"));
        let PipelineCommand::Export(ExportArgs { after, .. }) =
            parse(&["export", "--after", "5:0"])
        else {
            panic!("export");
        };
        assert_eq!(
            after,
            Some(ArchiveCursor {
                archived_at_ms: 5,
                transaction_id: 0
            })
        );
        for bad in [
            "",
            "5",
            ":5",
            "5:",
            "a:1",
            "1:+2",
            "-1:2",
            "1:2:3",
            " 1:2",
            "1:99999999999999999999",
        ] {
            let error = parse_cursor(bad).expect_err(bad);
            assert!(error.contains("ARCHIVED_AT_MS:ID"), "{bad:?}: {error}");
        }
        assert!(parse_error(&["export", "--after", "x"]).contains("ARCHIVED_AT_MS:ID"));
        assert!(parse_error(&["export", "--limit", "0"]).contains("--limit"));
        assert!(parse_error(&["export", "--limit", "1000001"]).contains("--limit"));
        let cursor = ArchiveCursor {
            archived_at_ms: 1_700_000_000_000,
            transaction_id: 42,
        };
        assert_eq!(parse_cursor(&cursor_text(&cursor)), Ok(cursor));
        assert_eq!(
            resume_hint(Some(cursor)),
            "resume with --after 1700000000000:42"
        );
    }

    #[test]
    fn compacting_a_document_removes_only_whitespace_between_tokens() {
        let stored = concat!(
            "{\n  \"a b\" : [1, 2.50, 12345678901234567890],\r\n",
            "\t\"q\\\"\\\\\": \" x \\n \",\"z\":{} }",
        );
        let compact = compact_json(stored);
        assert_eq!(
            compact,
            r#"{"a b":[1,2.50,12345678901234567890],"q\"\\":" x \n ","z":{}}"#
        );
        assert!(!compact.contains('\n'));
        let reparsed: Value = serde_json::from_str(&compact).expect("still JSON");
        let original: Value = serde_json::from_str(stored).expect("JSON");
        assert_eq!(reparsed, original);
        assert_eq!(compact_json("  \"\\u00e9\"  "), r#""\u00e9""#);
        assert_eq!(compact_json("true"), "true");
    }

    #[test]
    fn an_export_line_has_every_field_in_a_fixed_order_with_documents_embedded() {
        let tx = Transaction {
            pipeline: "checkout".to_owned(),
            external_id: "order-1".to_owned(),
            state: "{ \"amount\": 12345678901234567890 }".to_owned(),
            progress: r#"{"step":"charged"}"#.to_owned(),
            metadata: Some(TxMetadata {
                webhook_url: "https://example.com/hook".to_owned(),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            }),
            attempts: 1,
            last_started_at_ms: 1_500,
            completed_at_ms: 2_000,
            archived_at_ms: 62_000,
            ..transaction(TxStatus::Success)
        };
        let item = ArchivedTransaction {
            transaction: Some(tx),
            cursor: Some(ArchiveCursor {
                archived_at_ms: 62_000,
                transaction_id: 17,
            }),
        };
        let line = archive_line(&item).expect("a line");
        assert_eq!(
            line,
            concat!(
                r#"{"cursor":"62000:17","id":17,"pipeline":"checkout","node_group":"payments","#,
                r#""owner":"shop","external_id":"order-1","status":"success","#,
                r#""state":{"amount":12345678901234567890},"event":null,"#,
                r#""progress":{"step":"charged"},"#,
                r#""metadata":{"webhook_url":"https://example.com/hook","progress_reports":true,"#,
                r#""cancel_webhook_on_longpoll":false},"#,
                r#""cancel_requested":false,"attempts":1,"created_at_ms":1000,"#,
                r#""last_started_at_ms":1500,"completed_at_ms":2000,"notified_at_ms":null,"#,
                r#""archived_at_ms":62000,"version":3}"#,
            )
        );
        let parsed: Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(
            parsed["state"]["amount"].to_string(),
            "12345678901234567890"
        );
        assert_eq!(parsed["metadata"]["progress_reports"], true);
        let bare = ArchivedTransaction {
            transaction: None,
            cursor: None,
        };
        assert!(archive_line(&bare).is_err());
    }
}
