/*
 * tmpdir.c - the unit tests' scratch folder (see tmpdir.h). Removal walks
 * the tree depth-first with nftw (FTW_PHYS: a symlink a test made is removed,
 * not followed) instead of running "rm -rf" through a shell.
 */
#define _XOPEN_SOURCE 700
#include "tmpdir.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static char path[1024];

const char *tmpdir_make(const char *prefix)
{
	if (snprintf(dir, sizeof dir, "/tmp/%s_XXXXXX", prefix) >= (int)sizeof dir)
		return NULL;
	return mkdtemp(dir);
}

const char *tmpdir_path(void)
{
	return dir;
}

const char *tmpdir_at(const char *rel)
{
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	return path;
}

const char *tmpdir_last(void)
{
	return path;
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)type;
	(void)f;
	return remove(p);
}

void tmpdir_remove(void)
{
	if (dir[0] && nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}
