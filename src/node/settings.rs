//! One declaration per setting: the [`section!`] macro, which turns one declaration of a section of
//! settings (a `[table]` of a node file, a config type of the builder) into every form the setting takes,
//! so that none of them can drift from the others.
//!
//! For each setting the declaration gives its field name and type, its doc (with its unit), its default,
//! the form its node-file key is read in, and its rule; from it the macro makes
//!
//! - the config type's field, its doc ending with the default, the unit and the node-file key;
//! - the config type's `Default`;
//! - the setting's three spellings ([`Setting`](crate::Setting)): its id `clients.max_sessions`, its
//!   node-file key `[clients] max_sessions` and its builder spelling `ClientEndpointConfig::max_sessions`,
//!   all three from the section's name, the type's name and the field's name (a constant per setting in a
//!   module named after the section, `clients::max_sessions`, and the type's public `SETTINGS`);
//! - the rules, in declaration order (`check`: each refusal a `SettingError` naming the setting, its
//!   problem's placeholders resolved among the section's settings);
//! - with the `config` feature, the node file's table (its key = the field's name, every key optional,
//!   unknown keys refused), its `apply` onto the config type and its `merge` of a profile;
//! - a unit test that each documented default is the `Default`'s value (its `Debug` form).

use crate::node::NodeConfig;

/// Runs one setting's rule: `rule` reads the section and, for a rule that involves another part of the
/// configuration, the whole `node`; it returns the problem, if any (settings written `{id}`).
pub(crate) fn run_check<S>(
    section: &S,
    node: &NodeConfig,
    rule: impl Fn(&S, &NodeConfig) -> Option<String>,
) -> Option<String> {
    rule(section, node)
}

/// Declares a section of settings (see the module's doc for what it makes). The form:
///
/// ```text
/// section! {
///     /// The type's doc.
///     #[derive(Clone, Debug, PartialEq, Eq)]
///     pub struct ClientEndpointConfig: [clients] read by ClientsSection {
///         /// The field's doc.
///         pub max_sessions: usize = 1024, shown "1024", unit "sessions",
///             file usize,
///             check |clients, _node| (clients.max_sessions == 0).then(|| "must be at least 1".into());
///         ...
///     }
///     // optional: keys a file has beside the fields', and what they do after the fields are set
///     file only { /// doc
///         auth_key: Parsed<AuthKey>, }
///     then |file: &ClientsSection, clients: &mut ClientEndpointConfig| { ... };
/// }
/// ```
///
/// `shown` is the default's `Debug` form (what the doc says; a generated test holds it to the value),
/// `unit` what the number counts (a `Duration`'s `Debug` form carries its own), `file` the type the node
/// file's key is read as (turned into the field's type by `config::FileValue`).
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $Type:ident: [$section:ident] read by $File:ident {
            $(
                $(#[doc = $doc:expr])*
                pub $field:ident: $ty:ty = $default:expr, shown $shown:literal $(, unit $unit:literal)?,
                    file $fty:ty $(, check $check:expr)?;
            )*
        }
        $(
            file only {
                $( $(#[doc = $xdoc:expr])* $xkey:ident: $xty:ty, )*
            }
            then $finish:expr;
        )?
    ) => {
        $(#[$attr])*
        pub struct $Type {
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = concat!("Default: `", $shown, "`", $(" ", $unit,)? ".")]
                #[doc = concat!("Node files: `[", stringify!($section), "] ", stringify!($field), "`.")]
                pub $field: $ty,
            )*
        }

        impl Default for $Type {
            fn default() -> Self {
                Self { $($field: $default,)* }
            }
        }

        impl $Type {
            #[doc = concat!(
                "Every setting of this type (the `[", stringify!($section), "]` table of a node file), each in its ",
                "three spellings ([`Setting::name`](crate::Setting::name))."
            )]
            pub const SETTINGS: &'static [$crate::setting::Setting] = $section::ALL;

            /// Checks each setting by its rule, in declaration order; `node` is the whole configuration,
            /// for rules that involve another part of it.
            pub(crate) fn check(&self, node: &$crate::node::NodeConfig) -> Result<(), $crate::setting::SettingError> {
                $($(
                    if let Some(problem) = $crate::node::settings::run_check(self, node, $check) {
                        return Err($crate::setting::SettingError::new($section::$field, problem).among($section::ALL));
                    }
                )?)*
                Ok(())
            }
        }

        #[doc = concat!("The settings of `[", stringify!($section), "]` ([`", stringify!($Type), "`]), one per field.")]
        #[allow(non_upper_case_globals)]
        pub(crate) mod $section {
            use $crate::setting::Setting;

            $(
                #[doc = concat!("`", stringify!($Type), "::", stringify!($field), "`.")]
                pub(crate) const $field: Setting = Setting::new(
                    concat!(stringify!($section), ".", stringify!($field)),
                    concat!("[", stringify!($section), "] ", stringify!($field)),
                    concat!(stringify!($Type), "::", stringify!($field)),
                );
            )*

            /// Every one, in declaration order.
            pub(crate) const ALL: &[Setting] = &[$($field),*];

            #[test]
            fn every_documented_default_is_the_default() {
                let default = <super::$Type as Default>::default();
                $(
                    assert_eq!(
                        format!("{:?}", default.$field),
                        $shown,
                        concat!(stringify!($Type), "::", stringify!($field), ": its `shown` default")
                    );
                )*
            }
        }

        #[cfg(feature = "config")]
        #[doc = concat!("The `[", stringify!($section), "]` table of a node file (every key optional).")]
        #[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $File {
            $( $field: Option<$fty>, )*
            $($( $(#[doc = $xdoc])* $xkey: Option<$xty>, )*)?
        }

        #[cfg(feature = "config")]
        impl $File {
            /// Sets each setting the table gives, over `section`.
            pub(crate) fn apply(&self, section: &mut $Type) {
                use $crate::node::config::FileValue;
                $(
                    if let Some(value) = &self.$field {
                        section.$field = value.clone().value();
                    }
                )*
                $( ($finish)(self, section); )?
            }

            /// This table with every key `over` sets replaced by `over`'s value.
            pub(crate) fn merge(&mut self, over: Self) {
                $( if over.$field.is_some() { self.$field = over.$field; } )*
                $($( if over.$xkey.is_some() { self.$xkey = over.$xkey; } )*)?
            }
        }
    };
}

pub(crate) use section;
