//! Code lists known in advance: the action types the register published (the seed of the
//! projection's code list, `data/event-types.csv`) and the courts behind
//! `idOsobyPuvodce`.
//!
//! Owns static reference data only. Unknown codes are never mapped to a default: a
//! lookup that fails returns `None` and the caller keeps the code verbatim.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The action-type code list as published around 2020 (1065 codes).
pub const EVENT_TYPES_CSV: &str = include_str!("../data/event-types.csv");

#[derive(Debug, Clone)]
pub struct EventType {
    pub id: String,
    pub name: String,
    /// A service action without a document.
    pub service: bool,
    /// A readable claim document.
    pub readable: bool,
}

fn split_csv_line(line: &str) -> Vec<String> {
    // The file quotes every field and never embeds a quote in a name.
    line.split("\",\"")
        .map(|s| s.trim_matches('"').to_string())
        .collect()
}

/// The seeded code list, by code.
pub fn event_types() -> &'static HashMap<String, EventType> {
    static T: OnceLock<HashMap<String, EventType>> = OnceLock::new();
    T.get_or_init(|| {
        EVENT_TYPES_CSV
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| {
                let f = split_csv_line(l.trim_end_matches('\r'));
                (f.len() == 4).then(|| EventType {
                    id: f[0].clone(),
                    name: f[1].clone(),
                    service: f[2] == "1",
                    readable: f[3] == "1",
                })
            })
            .map(|t| (t.id.clone(), t))
            .collect()
    })
}

/// The type's name from the seeded list.
pub fn event_type_name(code: &str) -> Option<&'static str> {
    event_types().get(code).map(|t| t.name.as_str())
}

/// A court: the code in the feed, its short code and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Court {
    pub code: &'static str,
    pub short: &'static str,
    pub name: &'static str,
}

pub const COURTS: &[Court] = &[
    Court {
        code: "MSPHAAB",
        short: "MSPH",
        name: "Městský soud v Praze",
    },
    Court {
        code: "KSSTCAB",
        short: "KSPH",
        name: "Krajský soud v Praze",
    },
    Court {
        code: "KSJICCB",
        short: "KSCB",
        name: "Krajský soud v Českých Budějovicích",
    },
    Court {
        code: "KSZPCPM",
        short: "KSPL",
        name: "Krajský soud v Plzni",
    },
    Court {
        code: "KSSCEUL",
        short: "KSUL",
        name: "Krajský soud v Ústí nad Labem",
    },
    Court {
        code: "KSSECULP1",
        short: "KSLB",
        name: "Krajský soud v Ústí nad Labem – pobočka v Liberci",
    },
    Court {
        code: "KSVYCHK",
        short: "KSHK",
        name: "Krajský soud v Hradci Králové",
    },
    Court {
        code: "KSVYCHKP1",
        short: "KSPA",
        name: "Krajský soud v Hradci Králové – pobočka v Pardubicích",
    },
    Court {
        code: "KSJIMBM",
        short: "KSBR",
        name: "Krajský soud v Brně",
    },
    Court {
        code: "KSSEMOS",
        short: "KSOS",
        name: "Krajský soud v Ostravě",
    },
    Court {
        code: "KSSEMOSP1",
        short: "KSOL",
        name: "Krajský soud v Ostravě – pobočka v Olomouci",
    },
    Court {
        code: "VSSTCAB",
        short: "VSPH",
        name: "Vrchní soud v Praze",
    },
    Court {
        code: "VSSEMOC",
        short: "VSOL",
        name: "Vrchní soud v Olomouci",
    },
];

pub fn court(code: &str) -> Option<&'static Court> {
    COURTS.iter().find(|c| c.code == code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeded_list_is_complete_and_verbatim() {
        let t = super::event_types();
        assert_eq!(t.len(), 1065);
        assert_eq!(
            super::event_type_name("636"),
            Some("Znepřístupnění údajů o dlužníkovi dle § 425 IZ")
        );
        assert!(t["1"].service);
        assert!(t["63"].readable);
        assert_eq!(super::court("KSVYCHKP1").unwrap().short, "KSPA");
        assert!(super::court("CCA").is_none());
    }
}
