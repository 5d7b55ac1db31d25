//! The node's sections of settings (`[clients]`, `[storage]`) declared once, node files included: the
//! [`section!`] macro here is [`quorumcast_driver::section!`] (the field, its doc with default, unit and
//! file key, the `Default`, the three spellings, the rule, the test of the documented defaults) plus, with
//! the `config` feature, the node file's table read from the same declaration.
//!
//! The core lives in the driver crate because the types it declares live on every floor (the channel's
//! settings there, the consensus timers in the consensus crate); the node-file part lives here because
//! only this crate has the `config` feature and the file's value types (sizes, durations, parsed strings).
//! For each setting of a section declared here the macro adds, to what the driver's makes:
//!
//! - with the `config` feature, the node file's table (its key the setting's key, every key optional,
//!   unknown keys refused), its `apply` onto the config type and its `merge` of a profile. `file` names the
//!   type the key is read as (turned into the field's type by `config::FileValue`).

/// Declares a section of settings with its node-file table: the driver's [`quorumcast_driver::section!`]
/// form, `read by <the file table's type>` after `checked with`, and `file <type>` after each `key`:
///
/// ```text
/// section! {
///     /// The type's doc.
///     #[derive(Clone, Debug, PartialEq, Eq)]
///     pub struct ClientEndpointConfig in pub(crate) mod clients, built as ("ClientEndpointConfig::", ""),
///         checked with NodeConfig, read by ClientsSection {
///         /// The field's doc.
///         pub max_sessions: usize = 1024, shown "1024", unit "sessions",
///             key [clients] max_sessions, file usize,
///             check |clients, _node| (clients.max_sessions == 0).then(|| "must be at least 1".into());
///         ...
///     }
///     // optional: keys a file has beside the fields', and what they do after the fields are set
///     file only { /// doc
///         auth_key: Parsed<AuthKey>, }
///     then |file: &ClientsSection, clients: &mut ClientEndpointConfig| { ... };
/// }
/// ```
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $Type:ident in $vis:vis mod $module:ident, built as ($before:literal, $after:literal),
            checked with $Context:ty, read by $File:ident {
            $(
                $(#[doc = $doc:expr])*
                pub $field:ident: $ty:ty = $default:expr, shown $shown:literal $(, unit $unit:literal)?,
                    key [$table:ident] $key:ident, file $fty:ty $(, check $check:expr)?;
            )*
        }
        $(
            file only {
                $( $(#[doc = $xdoc:expr])* $xkey:ident: $xty:ty, )*
            }
            then $finish:expr;
        )?
    ) => {
        quorumcast_driver::section! {
            $(#[$attr])*
            pub struct $Type in $vis mod $module, built as ($before, $after), checked with $Context {
                $(
                    $(#[doc = $doc])*
                    pub $field: $ty = $default, shown $shown $(, unit $unit)?,
                        key [$table] $key $(, check $check)?;
                )*
            }
        }

        #[cfg(feature = "config")]
        #[doc = concat!("The node file's table of [`", stringify!($Type), "`] (every key optional).")]
        #[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $File {
            $( $key: Option<$fty>, )*
            $($( $(#[doc = $xdoc])* $xkey: Option<$xty>, )*)?
        }

        #[cfg(feature = "config")]
        impl $File {
            /// Sets each setting the table gives, over `section`.
            pub(crate) fn apply(&self, section: &mut $Type) {
                use $crate::node::config::FileValue;
                $(
                    if let Some(value) = &self.$key {
                        section.$field = value.clone().value();
                    }
                )*
                $( ($finish)(self, section); )?
            }

            /// This table with every key `over` sets replaced by `over`'s value.
            pub(crate) fn merge(&mut self, over: Self) {
                $( if over.$key.is_some() { self.$key = over.$key; } )*
                $($( if over.$xkey.is_some() { self.$xkey = over.$xkey; } )*)?
            }
        }
    };
}

pub(crate) use section;
