//! `certus ctl … config`: a cluster-wide configuration (the log's, the sessions', the
//! pipelines'), shown as a table of settings — one row per field, with the flag of `config set`
//! that changes it — or as JSON, and changed a few fields at a time.

use clap::{Args, Subcommand};
use comfy_table::Table;
use serde_json::{Value, json};

use super::Output;
use super::show::{human_ms, table};

/// What `… config` may do besides showing the configuration.
#[derive(Debug, Subcommand)]
pub(super) enum ConfigCommand<C: Args> {
    /// Change the given fields (at least one); the others keep their current values.
    Set(C),
}

/// One field of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Setting {
    /// Its name in JSON: the field's.
    name: &'static str,
    value: u64,
    unit: &'static str,
    /// The flag of `config set` that changes it, when it is not named for the field.
    flag: Option<&'static str>,
}

impl Setting {
    /// The field `name` (`max_tests`), set by the flag named for it (`--max-tests`).
    pub(super) fn new(name: &'static str, value: impl Into<u64>, unit: &'static str) -> Setting {
        Setting {
            name,
            value: value.into(),
            unit,
            flag: None,
        }
    }

    /// The same field set by another flag.
    pub(super) fn flag(self, flag: &'static str) -> Setting {
        Setting {
            flag: Some(flag),
            ..self
        }
    }

    /// The flag of `config set` that changes it.
    pub(super) fn flag_name(&self) -> String {
        match self.flag {
            Some(flag) => flag.to_owned(),
            None => format!("--{}", self.name.replace('_', "-")),
        }
    }
}

/// A configuration `ctl` shows and changes.
pub(super) trait Settings: Default {
    /// The `ctl` command it belongs to (`log`, `session`, `pipeline`), for messages.
    const COMMAND: &'static str;
    /// Whose configuration it is, as the line after a change says (`The log's`).
    const WHOSE: &'static str;
    /// Whether its values in milliseconds are also shown as durations (`300000 (5 min 0 s)`).
    const DURATIONS_SHOWN: bool;

    /// Its fields, in the order they are shown.
    fn settings(&self) -> Vec<Setting>;
}

/// The flags of `config set` for a configuration: its fields, `None` for those it keeps.
pub(super) trait Changes: Default + PartialEq {
    type Config: Settings;

    /// `config` with the given fields changed.
    fn changed(&self, config: &Self::Config) -> Self::Config;

    /// `config` with the given fields changed; `None` when no field is given.
    fn apply(&self, config: &Self::Config) -> Option<Self::Config> {
        (*self != Self::default()).then(|| self.changed(config))
    }
}

/// Runs `… config` (shows `current`, the configuration in force) or `… config set` (sends
/// `current` with the given fields changed through `replace`, which answers the configuration
/// then in force, and shows that with what changed).
pub(super) async fn run<K, Fut>(
    out: &Output,
    command: Option<ConfigCommand<K>>,
    current: K::Config,
    replace: impl FnOnce(K::Config) -> Fut,
) -> Result<(), String>
where
    K: Changes + Args,
    Fut: Future<Output = Result<K::Config, String>>,
{
    let Some(ConfigCommand::Set(changes)) = command else {
        out.emit(&config_json(&current), || {
            say!("{}", config_table(&current, None));
        });
        return Ok(());
    };
    let wanted = changes.apply(&current).ok_or_else(|| {
        format!(
            "{} config set: nothing to change; give at least one of {}",
            K::Config::COMMAND,
            flags::<K::Config>()
        )
    })?;
    let now = replace(wanted).await?;
    out.emit(&config_json(&now), || {
        say!("{} configuration is now:", K::Config::WHOSE);
        say!("{}", config_table(&now, Some(&current)));
    });
    Ok(())
}

/// The flags of `config set`, for messages.
fn flags<C: Settings>() -> String {
    let flags: Vec<String> = C::default()
        .settings()
        .iter()
        .map(Setting::flag_name)
        .collect();
    flags.join(", ")
}

/// The configuration as a JSON object, a member per field.
pub(super) fn config_json<C: Settings>(config: &C) -> Value {
    Value::Object(
        config
            .settings()
            .into_iter()
            .map(|setting| (setting.name.to_owned(), json!(setting.value)))
            .collect(),
    )
}

/// The configuration, one row per field with the flag that sets it; with `before`, a column
/// marking what changed.
pub(super) fn config_table<C: Settings>(config: &C, before: Option<&C>) -> Table {
    let mut header = vec!["setting", "value", "unit"];
    if before.is_some() {
        header.push("was");
    }
    let mut rows = table(&header);
    let old = before.map(Settings::settings);
    for (index, setting) in config.settings().into_iter().enumerate() {
        let Setting { value, unit, .. } = setting;
        let shown = if C::DURATIONS_SHOWN && unit == "ms" && value >= 1_000 {
            format!("{value} ({})", human_ms(value))
        } else {
            value.to_string()
        };
        let mut row = vec![setting.flag_name(), shown, unit.to_owned()];
        if let Some(old) = &old {
            let was = old[index].value;
            row.push(if was == value {
                String::new()
            } else {
                was.to_string()
            });
        }
        rows.add_row(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use certus_client::{LogConfig, PipelineConfig, SessionConfig};
    use clap::FromArgMatches;

    use super::*;
    use crate::ctl::testing::{parse, parse_error};

    /// Every flag the table names is one the parser takes, and changes its own field only;
    /// no flag at all is refused.
    fn each_flag_sets_its_own_field<K: Changes + Args + FromArgMatches + Debug>() {
        let defaults = K::Config::default();
        assert!(K::default().apply(&defaults).is_none(), "nothing to change");
        let settings = defaults.settings();
        for (index, setting) in settings.iter().enumerate() {
            let flag = setting.flag_name();
            let ConfigCommand::Set(parsed) =
                parse::<ConfigCommand<K>>("config", &["set", &flag, "7"]);
            let changed = parsed.apply(&defaults).expect("a change").settings();
            for (other, (now, was)) in changed.iter().zip(&settings).enumerate() {
                let expected = if other == index { 7 } else { was.value };
                assert_eq!(now.value, expected, "{flag} changed {}", now.name);
            }
            let error = parse_error::<ConfigCommand<K>>("config", &["set", &format!("{flag}=-1")]);
            assert!(error.contains(&flag), "{error}");
        }
    }

    #[test]
    fn every_configuration_changes_one_field_per_flag() {
        each_flag_sets_its_own_field::<super::super::log::ConfigChanges>();
        each_flag_sets_its_own_field::<super::super::session::ConfigChanges>();
        each_flag_sets_its_own_field::<super::super::pipeline::ConfigChanges>();
    }

    #[test]
    fn the_table_marks_what_changed_and_json_names_every_field() {
        let before = SessionConfig {
            max_tests: 10,
            test_retry_ms: 2_000,
            sessions_max: 100_000,
            ..SessionConfig::default()
        };
        let now = SessionConfig {
            max_tests: 3,
            ..before
        };
        let text = config_table(&now, Some(&before)).to_string();
        let row = |flag: &str| {
            text.lines()
                .find(|line| line.contains(flag))
                .unwrap_or_else(|| panic!("a {flag} row: {text}"))
                .to_owned()
        };
        let tests = row("--max-tests");
        assert!(tests.contains('3') && tests.contains("10"), "{tests}");
        let max = row("--sessions-max");
        assert_eq!(max.matches("100000").count(), 1, "unchanged: {max}");
        assert!(row("--test-retry-ms").contains("2000 (2.0 s)"), "{text}");
        assert!(!config_table(&now, None).to_string().contains("was"));

        let document = config_json(&now);
        assert_eq!(document.as_object().expect("an object").len(), 6);
        assert_eq!(document["max_tests"], 3);
        assert_eq!(
            config_json(&LogConfig::default())["unsequenced_watermark"],
            0
        );
        assert_eq!(
            config_json(&PipelineConfig::default())
                .as_object()
                .map(|o| o.len()),
            Some(12)
        );
    }

    #[test]
    fn the_log_shows_milliseconds_as_plain_numbers() {
        let log = LogConfig {
            report_ttl_ms: 30_000,
            ..LogConfig::default()
        };
        let text = config_table(&log, None).to_string();
        let ttl = text
            .lines()
            .find(|line| line.contains("--report-ttl-ms"))
            .expect("a ttl row");
        assert!(ttl.contains("30000") && !ttl.contains("30.0 s"), "{ttl}");
    }
}
