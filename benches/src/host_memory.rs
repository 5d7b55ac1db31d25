//! Whether this host's hypervisor takes freed guest memory back: virtio-balloon free page reporting.
//!
//! A guest whose balloon device offers `VIRTIO_BALLOON_F_REPORTING` (feature bit 5) hands every free
//! block of `page_reporting_order` (9: 2 MiB) or more back to the hypervisor a couple of seconds after it
//! is freed, and the hypervisor drops its backing. The next time the guest uses that memory, each page
//! costs a fault in the hypervisor before its first write completes. Nothing in the guest shows it but
//! the time: on the AMD EPYC guest of 2026-12-05 a first write of fresh anonymous memory cost 2.2 ns/B
//! where the hypervisor had dropped it and 0.37-0.46 ns/B where it had not, and the page cache pays the
//! same when a recorder appends to its segments (docs/runs/2026-12-05.md): new page-cache
//! pages are free memory, mostly reported. A node recording its log on such a guest pays it on every
//! byte the page cache takes into memory it had given back; the benches say so beside their figures.
//!
//! Read from sysfs only; `None` (not known) where the files are absent or unreadable.

use std::path::Path;

/// `VIRTIO_BALLOON_F_REPORTING`: the device takes reports of free pages.
const FEATURE_REPORTING: usize = 5;
/// The virtio device id of a memory balloon.
const BALLOON_DEVICE_ID: &str = "0x0005";

/// Free page reporting as this guest's kernel has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreePageReporting {
    /// A balloon device that takes reports is bound to its driver: reporting is on.
    pub on: bool,
    /// The smallest free block reported, as a page order (9: 2 MiB); a value above the kernel's largest
    /// order reports nothing.
    pub order: u32,
    /// KiB reported since boot, where the kernel counts them (`reported_kib`, not in every kernel).
    pub reported_kib: Option<u64>,
}

impl FreePageReporting {
    /// Reads it from `/sys`; `None` when this kernel has no free page reporting.
    pub fn read() -> Option<Self> {
        Self::read_from(Path::new("/sys"))
    }

    /// Reads it from a sysfs tree rooted at `sys`.
    pub fn read_from(sys: &Path) -> Option<Self> {
        let parameters = sys.join("module/page_reporting/parameters");
        let order = std::fs::read_to_string(parameters.join("page_reporting_order")).ok()?.trim().parse().ok()?;
        let reported_kib =
            std::fs::read_to_string(parameters.join("reported_kib")).ok().and_then(|k| k.trim().parse().ok());
        let on = reporting_balloon_bound(&sys.join("bus/virtio/devices")) && order <= MAX_PAGE_ORDER;
        Some(Self { on, order, reported_kib })
    }

    /// One line for a report: on or off, the order, and the KiB given back since `before` when counted.
    pub fn describe(&self, before: Option<&FreePageReporting>) -> String {
        if !self.on {
            return format!("free page reporting off (order {})", self.order);
        }
        let block_kib = 4u64 << self.order;
        let mut line = format!(
            "free page reporting on (virtio-balloon; free blocks of {block_kib} KiB and more go back to the hypervisor, \
             and each page of them costs a hypervisor fault when next used)"
        );
        if let (Some(now), Some(then)) = (self.reported_kib, before.and_then(|b| b.reported_kib)) {
            line += &format!("; {:.1} GB given back during the run", now.saturating_sub(then) as f64 * 1024.0 / 1e9);
        }
        line
    }
}

/// The largest page order x86-64 kernels allocate (`MAX_PAGE_ORDER`): an order above it reports nothing.
const MAX_PAGE_ORDER: u32 = 10;

/// True when a virtio balloon device that offers free page reporting is bound to a driver.
fn reporting_balloon_bound(devices: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(devices) else {
        return false;
    };
    entries.flatten().any(|device| {
        let path = device.path();
        let id = std::fs::read_to_string(path.join("device")).unwrap_or_default();
        let features = std::fs::read_to_string(path.join("features")).unwrap_or_default();
        id.trim() == BALLOON_DEVICE_ID && offers(&features, FEATURE_REPORTING) && path.join("driver").exists()
    })
}

/// True when sysfs's `features` string (one `0`/`1` per feature bit, bit 0 first) has `bit` set.
fn offers(features: &str, bit: usize) -> bool {
    features.trim().as_bytes().get(bit) == Some(&b'1')
}

#[cfg(test)]
mod tests {
    use quorumcast_testkit::ScratchDir;

    use super::*;

    fn sysfs(name: &str, order: &str, reported: Option<&str>, features: &str, bound: bool) -> ScratchDir {
        let root = ScratchDir::new(name);
        let parameters = root.path().join("module/page_reporting/parameters");
        std::fs::create_dir_all(&parameters).unwrap();
        std::fs::write(parameters.join("page_reporting_order"), order).unwrap();
        if let Some(reported) = reported {
            std::fs::write(parameters.join("reported_kib"), reported).unwrap();
        }
        let device = root.path().join("bus/virtio/devices/virtio0");
        std::fs::create_dir_all(&device).unwrap();
        std::fs::write(device.join("device"), "0x0005\n").unwrap();
        std::fs::write(device.join("features"), features).unwrap();
        if bound {
            std::fs::create_dir_all(device.join("driver")).unwrap();
        }
        root
    }

    const REPORTING: &str = "0110010100000000\n";

    #[test]
    fn a_bound_balloon_that_offers_reporting_at_a_real_order_is_on() {
        let root = sysfs("reporting-on", "9\n", Some("33762428\n"), REPORTING, true);
        let reporting = FreePageReporting::read_from(root.path()).unwrap();
        assert_eq!(reporting, FreePageReporting { on: true, order: 9, reported_kib: Some(33_762_428) });
        let before = FreePageReporting { reported_kib: Some(33_762_428 - 1_000_000), ..reporting };
        assert!(reporting.describe(Some(&before)).contains("2048 KiB"));
        assert!(
            reporting.describe(Some(&before)).contains("1.0 GB given back"),
            "{}",
            reporting.describe(Some(&before))
        );
    }

    #[test]
    fn reporting_is_off_without_the_feature_the_driver_or_a_real_order() {
        let no_feature = sysfs("reporting-no-feature", "9", None, "0110000100000000", true);
        let unbound = sysfs("reporting-unbound", "9", None, REPORTING, false);
        let above_max = sysfs("reporting-above-max", "11", None, REPORTING, true);
        for root in [&no_feature, &unbound, &above_max] {
            let reporting = FreePageReporting::read_from(root.path()).unwrap();
            assert!(!reporting.on, "{reporting:?}");
            assert!(reporting.describe(None).starts_with("free page reporting off"));
        }
        assert_eq!(FreePageReporting::read_from(above_max.path()).unwrap().reported_kib, None);
    }

    #[test]
    fn a_kernel_without_free_page_reporting_reads_as_not_known() {
        let root = ScratchDir::new("reporting-absent");
        assert_eq!(FreePageReporting::read_from(root.path()), None);
    }
}
