package netif

// sysfsRoot is where sysfs is mounted.
const sysfsRoot = "/sys"

// annotate adds what sysfs knows: the driver, Thunderbolt detection, the
// kind of interface and the link speed.
func annotate(ifs []Interface) { annotateFromSysfs(ifs, sysfsRoot) }
