// Stand-ins for the five libudev functions that Debian's static hwloc calls, for the fully static
// poolrun-rank: Debian ships no static libudev. hwloc asks udev only for the vendor, model and
// serial of block devices, and poolrun-rank keeps no I/O object; udev_new() failing is what hwloc
// sees on a machine without udev, and it then reads /run/udev/data itself.

extern "C" {

struct udev;
struct udev_device;

udev* udev_new() {
  return nullptr;
}
udev* udev_unref(udev*) {
  return nullptr;
}
udev_device* udev_device_new_from_subsystem_sysname(udev*, const char*, const char*) {
  return nullptr;
}
const char* udev_device_get_property_value(udev_device*, const char*) {
  return nullptr;
}
udev_device* udev_device_unref(udev_device*) {
  return nullptr;
}

}  // extern "C"
