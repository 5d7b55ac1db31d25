//! A node's settings as each front end names them, and the one declaration each setting has.
//!
//! Every setting is declared once, with [`section!`](crate::section): one declaration of a config type
//! (the channel's [`ChannelConfig`](crate::media::channel::ChannelConfig), the consensus `Timers`, the
//! node's sections) gives each field its type, its doc, its default (shown in the doc with its unit, and
//! held to the `Default` by a generated test), its node-file key, its builder spelling and its rule.
//! The macro lives here, at the bottom of the layers, because the types it declares live on every floor:
//! a lower crate declares its own settings with their node-file keys, so the key, the field and the rule
//! are spelled in one place whichever crate reads the file.
//!
//! A rule's refusal is a [`SettingError`]: the setting it refuses and the problem, in which every
//! setting it mentions is a placeholder (`{consensus.election_timeout_min}`) that each front end renders
//! in its own terms. So an embedder never reads a file key it has no file for, and an operator never
//! reads a field name the file does not have.

use std::fmt;

/// How a front end names settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontEnd {
    /// A node file (`qc-node --config`, `NodeFile`, feature `config`).
    NodeFile,
    /// The embedding API (`quorumcast::NodeBuilder`).
    Builder,
}

/// A setting a rule checks, in its three spellings: its placeholder id (`consensus.heartbeat_timeout`),
/// its node-file key (`[consensus] heartbeat_timeout`) and its builder spelling
/// (`NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })`).
///
/// Each is made by [`section!`](crate::section) from the declaration of its field, beside its file key,
/// default and rule: a config type's `SETTINGS` lists its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Setting {
    id: &'static str,
    file: &'static str,
    builder: &'static str,
}

impl Setting {
    /// The setting with placeholder `id`, node-file key `file` and builder spelling `builder`.
    pub const fn new(id: &'static str, file: &'static str, builder: &'static str) -> Self {
        Self { id, file, builder }
    }

    /// Its placeholder name in a [`SettingError`]'s problem (`{` id `}`).
    pub fn id(self) -> &'static str {
        self.id
    }

    /// Its name in `front`'s terms.
    pub fn name(self, front: FrontEnd) -> &'static str {
        match front {
            FrontEnd::NodeFile => self.file,
            FrontEnd::Builder => self.builder,
        }
    }
}

/// Runs one setting's rule (for [`section!`](crate::section)): `rule` reads the section and its context
/// (the rest of the configuration a rule may involve) and returns the problem, if any, with the settings it
/// names written `{id}`. A function, so that the rule's closure has its argument types from it.
pub fn run_check<S, C: ?Sized>(section: &S, context: &C, rule: impl Fn(&S, &C) -> Option<String>) -> Option<String> {
    rule(section, context)
}

/// How a node file writes a setting's value: the form its front end turns into the field's type. A
/// declaration names one after `file`; a front end that reads files implements [`ReadValue`] for each
/// (field type, form) pair it meets, so a setting's form is spelled once, beside its key.
pub mod form {
    /// The file's value as it is: a bool, an integer, a string, an array (an `Option` field: `Some`).
    pub struct Plain;
    /// A size in bytes: a whole number, or a string with B, KiB, MiB or GiB.
    pub struct Size;
    /// A size in a string, or `"off"` (an `Option<u64>` field: `None`).
    pub struct SizeOrOff;
    /// A duration: a string with a whole number and ns, us, ms or s.
    pub struct Duration;
    /// A duration in the file, whole nanoseconds in the field.
    pub struct Nanos;
    /// A string in the form the field type's `FromStr` takes.
    pub struct Text;
    /// A string in the form `FromStr` of the `Option` field's type takes.
    pub struct SomeText;
    /// An array of strings, each in the form `FromStr` of the `Vec` field's element takes.
    pub struct TextList;
    /// An array of inline tables, each an entry the front end knows (`{ name, key }` client keys).
    pub struct Entries;
    /// Read by the front end itself, with what it knows beside the section (`members`).
    pub struct Elsewhere;
}

/// A node-file value that a front end reads as a `T` written in form `F` (see [`form`]).
pub trait ReadValue<T, F> {
    /// The value, or what is wrong with it (the front end adds the key).
    fn read_value(&self) -> Result<T, String>;
}

/// A value read elsewhere is never read by its section (see [`form::Elsewhere`]).
impl<V: ?Sized, T> ReadValue<T, form::Elsewhere> for V {
    fn read_value(&self) -> Result<T, String> {
        Err("is read by the front end, not by its section".into())
    }
}

/// Declares a config type whose fields are settings, once: everything each setting is made of comes from
/// its one entry, so that no spelling, default or rule can drift from the others. The form:
///
/// ```text
/// quorumcast_driver::section! {
///     /// The type's doc.
///     #[derive(Clone, Debug, PartialEq)]
///     pub struct ChannelConfig in pub(crate) mod settings, built as ("ChannelConfig::", ""),
///         checked with () {
///         /// The field's doc (with what the number counts, when the unit alone does not say).
///         pub mtu: usize = MTU_1408, shown "1408", unit "bytes",
///             key [channel] mtu, file Plain,
///             check |channel, _| validate_mtu(channel.mtu, channel.term_length).err().map(|e| e.0.problem);
///         /// A setting with an older name a file may still use, and a builder spelling of its own.
///         pub term_length: usize = DEFAULT_TERM_LENGTH, shown "16777216", unit "bytes",
///             key [channel] term_buffer_length or term_length, file Size, built as ("NodeBuilder::", "");
///         /// A field that is not a setting of its own (no key: no file key, no rule).
///         pub source: Option<SocketAddr> = None, shown "None";
///         /// A field whose type documents its own settings.
///         pub socket: SocketOptions = SocketOptions::default(), shown "as its type documents";
///         ...
///     }
/// }
/// ```
///
/// From it, for each field:
///
/// - the field, its doc ending with ``Default: `<shown>` <unit>.`` (or `Default: as its type documents.`)
///   and, for a setting, ``Node files: `<file key>`.``;
/// - the type's `Default` (or, with `defaults in fn name` after `checked with`, a crate-private `fn name()`
///   for a type whose required fields have no default), and a unit test that each `shown` is the default's
///   `Debug` form;
/// - for a field with a `key`, its [`Setting`] in three spellings, a constant named for the field in the
///   named module (`settings::mtu`), listed in the type's public `SETTINGS`: the id `table.key` (or
///   `node.key` for a key at the top of the file, `key [] clean_stale`), the file key `[table] key` (or
///   `key`), and the builder spelling `<before><field><after>` from `built as (before, after)` (the
///   field's own, else the type's);
/// - its form in a node file (`file`, one of [`form`]'s), read by the type's `read_file` (visible as the
///   module is), which asks the front end for each setting's value in declaration order and sets the
///   field;
/// - its rule, if any, in `check(&self, context)`, which runs the rules in declaration order and returns
///   the first refusal as a [`SettingError`] that resolves the section's placeholders; `context` (of the
///   type after `checked with`) is what a rule across sections reads (`()` when none does).
///
/// `shown` is the default's `Debug` form, `unit` what the number counts (a `Duration`'s `Debug` form
/// carries its own). The table of a file is the key's; a file key need not be in the table the type is
/// named for (the channel's timers are `[timers]` keys).
#[macro_export]
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $Type:ident in $vis:vis mod $module:ident, built as ($before:literal, $after:literal),
            checked with $Context:ty $(, defaults in fn $defaults:ident)? {
            $(
                $(#[doc = $doc:expr])*
                pub $field:ident: $ty:ty = $default:expr, shown $shown:tt $(, unit $unit:literal)?
                    $(, key [$($table:ident)?] $key:ident $(or $alias:ident)?, file $form:ident
                        $(, built as ($fbefore:literal, $fafter:literal))? $(, check $check:expr)?)?;
            )*
        }
    ) => {
        $(#[$attr])*
        pub struct $Type {
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = $crate::section!(@default_doc $shown $(, $unit)?)]
                $(#[doc = concat!("Node files: `", $crate::section!(@file [$($table)?] $key), "`.")])?
                pub $field: $ty,
            )*
        }

        $crate::section!(@defaults $Type ($($defaults)?) { $($field: $default,)* });

        impl $Type {
            #[doc = concat!(
                "Every setting of this type, in declaration order, each in its three spellings ",
                "([`Setting::name`](", stringify!($crate), "::setting::Setting::name))."
            )]
            pub const SETTINGS: &'static [$crate::setting::Setting] = $module::ALL;

            /// Checks each setting by its rule, in declaration order: the first refusal, if any. `context` is
            /// the rest of the configuration, for rules that involve it.
            #[allow(dead_code)]
            pub(crate) fn check(&self, context: &$Context) -> Result<(), $crate::setting::SettingError> {
                let _ = context;
                $($($(
                    if let Some(problem) = $crate::setting::run_check(self, context, $check) {
                        return Err($crate::setting::SettingError::new($module::$field, problem).among($module::ALL));
                    }
                )?)?)*
                Ok(())
            }

            /// Sets each setting a node file gives, in declaration order: `lookup` is asked for each by its
            /// `Setting` and the file keys it is read under (its own, then any older name), and returns
            /// the file's value, if any, which is read in the setting's form. Settings whose front end reads
            /// them itself (`file Elsewhere`) are not asked for. The first value that does not read is
            /// refused, naming the setting.
            #[allow(dead_code, unused_mut, unused_variables)]
            $vis fn read_file<V>(
                &mut self,
                mut lookup: impl FnMut($crate::setting::Setting, &[&'static str]) -> Option<V>,
            ) -> Result<(), $crate::setting::SettingError>
            where
                $($( V: $crate::setting::ReadValue<$ty, $crate::setting::form::$form>, )?)*
            {
                $($(
                    $crate::section!(@read $form, self, $field, $module, lookup,
                        $crate::section!(@names [$($table)?] $key $($alias)?));
                )?)*
                Ok(())
            }
        }

        #[doc = concat!("The settings of [`", stringify!($Type), "`], one per field that is a setting.")]
        #[allow(non_upper_case_globals)]
        $vis mod $module {
            use $crate::setting::Setting;

            $($(
                #[doc = concat!("`", stringify!($Type), "::", stringify!($field), "`.")]
                pub const $field: Setting = Setting::new(
                    $crate::section!(@id [$($table)?] $key),
                    $crate::section!(@file [$($table)?] $key),
                    $crate::section!(@built $field ($before, $after) $(($fbefore, $fafter))?),
                );
            )?)*

            /// Every one, in declaration order.
            pub const ALL: &[Setting] = &[$($($crate::section!(@this $field $key),)?)*];

            #[test]
            fn every_documented_default_is_the_default() {
                let default = $crate::section!(@default_value (super::$Type) ($($defaults)?));
                $(
                    $crate::section!(@compare $shown, default.$field, concat!(stringify!($Type), "::", stringify!($field)));
                )*
            }
        }
    };
    (@id [$table:ident] $key:ident) => { concat!(stringify!($table), ".", stringify!($key)) };
    (@id [] $key:ident) => { concat!("node.", stringify!($key)) };
    (@file [$table:ident] $key:ident) => { concat!("[", stringify!($table), "] ", stringify!($key)) };
    (@file [] $key:ident) => { stringify!($key) };
    (@built $field:ident ($before:literal, $after:literal)) => { concat!($before, stringify!($field), $after) };
    (@built $field:ident ($before:literal, $after:literal) ($fbefore:literal, $fafter:literal)) => {
        concat!($fbefore, stringify!($field), $fafter)
    };
    (@default_doc "as its type documents") => { "Default: as its type documents." };
    (@default_doc $shown:tt) => { concat!("Default: `", $shown, "`.") };
    (@default_doc $shown:tt, $unit:literal) => { concat!("Default: `", $shown, "` ", $unit, ".") };
    (@compare "as its type documents", $value:expr, $name:expr) => {
        // A config type of its own, whose declaration holds its defaults to its docs.
        let _ = &$value;
    };
    (@compare $shown:tt, $value:expr, $name:expr) => {
        assert_eq!(format!("{:?}", $value), $shown, "{}: its `shown` default", $name);
    };
    (@names [$($table:ident)?] $key:ident) => { [$crate::section!(@file [$($table)?] $key)] };
    (@names [$($table:ident)?] $key:ident $alias:ident) => {
        [$crate::section!(@file [$($table)?] $key), $crate::section!(@file [$($table)?] $alias)]
    };
    (@read Elsewhere, $self:ident, $field:ident, $module:ident, $lookup:ident, $names:expr) => {};
    (@read $form:ident, $self:ident, $field:ident, $module:ident, $lookup:ident, $names:expr) => {
        if let Some(value) = $lookup($module::$field, &$names) {
            $self.$field = $crate::setting::ReadValue::<_, $crate::setting::form::$form>::read_value(&value)
                .map_err(|problem| $crate::setting::SettingError::new($module::$field, problem))?;
        }
    };
    (@defaults $Type:ident () { $($field:ident: $default:expr,)* }) => {
        impl Default for $Type {
            fn default() -> Self {
                Self { $($field: $default,)* }
            }
        }
    };
    (@defaults $Type:ident ($defaults:ident) { $($field:ident: $default:expr,)* }) => {
        impl $Type {
            /// Every field at its declared default (the required ones too: a caller sets them).
            pub(crate) fn $defaults() -> Self {
                Self { $($field: $default,)* }
            }
        }
    };
    (@default_value ($($Type:tt)*) ()) => { <$($Type)* as Default>::default() };
    (@default_value ($($Type:tt)*) ($defaults:ident)) => { $($Type)*::$defaults() };
    (@this $field:ident $key:ident) => { $field };
}

/// A setting refused by a rule: which one, and the problem, with every setting it names as a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    /// The setting to change.
    pub setting: Setting,
    /// What is wrong and what to do, settings written `{id}` ([`Setting::id`]).
    pub problem: String,
    /// The sections whose settings the problem may name (the refused setting's own, and any other a rule
    /// across sections names).
    among: Vec<&'static [Setting]>,
}

impl SettingError {
    /// A refusal of `setting`; `problem` names settings as `{id}`.
    pub fn new(setting: Setting, problem: impl Into<String>) -> Self {
        Self { setting, problem: problem.into(), among: Vec::new() }
    }

    /// This refusal, its problem's placeholders also resolved among `settings` (a section's `SETTINGS`).
    pub fn among(mut self, settings: &'static [Setting]) -> Self {
        if !self.among.iter().any(|known| std::ptr::eq(*known, settings)) {
            self.among.push(settings);
        }
        self
    }

    /// The refusal in `front`'s terms: `<setting>: <problem>`.
    pub fn render(&self, front: FrontEnd) -> String {
        let mut problem = self.problem.clone();
        for setting in self.among.iter().flat_map(|section| section.iter()).chain([&self.setting]) {
            problem = problem.replace(&format!("{{{}}}", setting.id()), setting.name(front));
        }
        format!("{}: {problem}", self.setting.name(front))
    }
}

impl fmt::Display for SettingError {
    /// In the embedder's terms (a node file's front end renders it itself).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(FrontEnd::Builder))
    }
}

impl std::error::Error for SettingError {}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Setting = Setting::new(
        "consensus.heartbeat_timeout",
        "[consensus] heartbeat_timeout",
        "NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })",
    );
    const MIN: Setting = Setting::new(
        "consensus.election_timeout_min",
        "[consensus] election_timeout_min",
        "NodeBuilder::timers(Timers { election_timeout_min_ns, .. })",
    );

    #[test]
    fn a_refusal_names_every_setting_in_the_front_ends_terms() {
        static SECTION: [Setting; 2] = [TIMEOUT, MIN];
        let e = SettingError::new(TIMEOUT, "(1s) must be below {consensus.election_timeout_min} (1s)").among(&SECTION);
        assert_eq!(
            e.render(FrontEnd::NodeFile),
            "[consensus] heartbeat_timeout: (1s) must be below [consensus] election_timeout_min (1s)"
        );
        let builder = e.render(FrontEnd::Builder);
        assert!(builder.starts_with("NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. })"), "{builder}");
        assert!(builder.contains("election_timeout_min_ns"), "{builder}");
        assert!(!builder.contains("[consensus]"), "{builder}");
    }
}
