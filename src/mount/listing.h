/*
 * The names of one ListObjectsV2 page (delimiter "/") as entries of the directory whose
 * key prefix was asked for: no FUSE, no locks, no allocation, so that a fuzz target
 * (tests/fuzz/fuzz_mount_listing.c) reaches it with any page a hostile server could send.
 *
 * Invariants: every name handed out is a suffix of a key or prefix that starts with the
 * asked prefix `dkey` (a name shorter than it, or another prefix, is skipped, never read
 * past), is 1..255 bytes, has no '/', and is neither "." nor ".."; a directory's name is
 * handed out without its trailing '/'.
 */
#ifndef S3FLASH_MOUNT_LISTING_H
#define S3FLASH_MOUNT_LISTING_H

#include <stddef.h>

#include <s3flash/s3flash.h>

#define MNT_NAME_MAX 255

/* Is name[0..len) a name the mount shows (1..255 bytes, no '/', not "." or "..")? */
int mnt_valid_name(const char *name, size_t len);

/* One entry of a page: `obj` is the object (NULL for a directory). `hold`: a file whose
 * name starts the page's last name, so that its directory may still come on the next
 * page (only names that start with the file's sort between "name" and "name/"). A file
 * shadowed by a directory of the same name on this page is not handed out. Returns 0 to
 * go on, anything else stops the walk and is returned. */
typedef int (*mnt_page_fn)(void *user, const char *name, size_t len,
                           const struct s3f_list_entry *obj, int hold);

/* Walk the page's keys and prefixes under `dkey` in S3's order. */
int mnt_page_walk(const struct s3f_list_page *page, const char *dkey, mnt_page_fn fn,
                  void *user);

/* Does the page list the directory `name` (the prefix dkey + name + "/")? */
int mnt_page_has_dir(const struct s3f_list_page *page, const char *dkey, const char *name,
                     size_t len);

/* The page's last name below `dkey` when the listing goes on (else NULL): a pointer into
 * the page. */
const char *mnt_page_last(const struct s3f_list_page *page, const char *dkey);

#endif /* S3FLASH_MOUNT_LISTING_H */
