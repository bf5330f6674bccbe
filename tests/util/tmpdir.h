/*
 * tmpdir.h - a scratch folder for one test at a time: the fixture the unit
 * tests that write files (samples, models, statistics) share.
 *
 *   setup:    cr_assert_not_null(tmpdir_make("oq_calib"));   -> /tmp/oq_calib_XXXXXX
 *   in tests: tmpdir_at("s/000.npy")                         -> /tmp/oq_calib_ab12cd/s/000.npy
 *   teardown: tmpdir_remove();                                 the folder and everything in it
 */
#ifndef OQ_TMPDIR_H
#define OQ_TMPDIR_H

/* Creates /tmp/PREFIX_XXXXXX (mkdtemp) and returns its path, or NULL on failure. */
const char *tmpdir_make(const char *prefix);
/* The folder made last (empty string before the first tmpdir_make). */
const char *tmpdir_path(void);
/* folder + "/" + rel in a static buffer, valid until the next call (tmpdir_last() returns it
 * again). */
const char *tmpdir_at(const char *rel);
const char *tmpdir_last(void);
/* Removes the folder with everything below it (symlinks are not followed); a failure is printed. */
void tmpdir_remove(void);

#endif
