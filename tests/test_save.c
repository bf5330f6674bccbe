/*
 * test_save.c - the saver's automatic switch to external data when a model
 * would pass the protobuf limit (the limit is lowered through
 * oq_save_opts.auto_limit so a small model exercises the same path).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/io/onnx_io.h"

static oq_model *load_tiny(void)
{
	char path[4096];
	const char *src = getenv("OQ_SOURCE_DIR");
	oq_model *m = NULL;
	oq_diag d;
	oq_diag_init(&d);
	snprintf(path, sizeof path, "%s/models/tiny_cnn.onnx", src ? src : ".");
	cr_assert_eq(oq_model_load(path, &m, &d), OQ_OK, "%s", d.msg);
	return m;
}

Test(save, auto_external_past_limit)
{
	char dir[] = "/tmp/oq_save_XXXXXX", out[256], data[300];
	oq_save_opts o = {0};
	oq_save_info info;
	oq_diag d;
	oq_model *m = load_tiny(), *r = NULL;
	struct stat st;

	cr_assert(mkdtemp(dir));
	snprintf(out, sizeof out, "%s/m.onnx", dir);
	o.auto_limit = 1000; /* tiny_cnn holds 6512 bytes of float weights */
	oq_diag_init(&d);
	cr_assert_eq(oq_model_save(m, out, &o, &info, &d), OQ_OK, "%s", d.msg);
	/* the data file is named by its content: m.onnx.<16 hex digits>.data */
	cr_expect_eq(strlen(info.data_name), strlen("m.onnx.") + 16 + strlen(".data"), "%s", info.data_name);
	cr_expect_eq(strncmp(info.data_name, "m.onnx.", 7), 0, "%s", info.data_name);
	snprintf(data, sizeof data, "%s/%s", dir, info.data_name);
	cr_expect(info.auto_external);
	cr_expect(info.went_external);
	cr_expect_gt(info.n_external, 0);
	cr_assert_eq(stat(data, &st), 0, "no %s", data);
	/* every initializer of at least 1024 bytes moved: conv2/conv3/fc weights */
	cr_expect_eq((size_t)st.st_size, info.data_bytes);
	cr_assert_eq(oq_model_load(out, &r, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(r->graph->n_inits, m->graph->n_inits);
	for (size_t i = 0; i < m->graph->n_inits; i++)
		cr_expect(oq_tensor_equal(m->graph->inits[i]->init, r->graph->inits[i]->init),
			  "initializer %s differs", m->graph->inits[i]->name);
	oq_model_free(r);
	oq_model_free(m);
	unlink(data);
	unlink(out);
	rmdir(dir);
}

Test(save, refuses_past_limit_when_auto_is_off)
{
	char dir[] = "/tmp/oq_save_XXXXXX", out[256];
	oq_save_opts o = {0};
	oq_diag d;
	oq_model *m = load_tiny();
	FILE *f;
	char buf[16] = "";

	cr_assert(mkdtemp(dir));
	snprintf(out, sizeof out, "%s/m.onnx", dir);
	f = fopen(out, "w");
	fputs("old", f);
	fclose(f);
	o.auto_limit = 1000;
	o.no_auto_external = 1;
	oq_diag_init(&d);
	cr_expect_eq(oq_model_save(m, out, &o, NULL, &d), OQ_EUNSUP);
	cr_expect(strstr(d.msg, "2 GB") != NULL, "%s", d.msg);
	f = fopen(out, "r");
	cr_assert(f);
	cr_expect(fgets(buf, sizeof buf, f) && strcmp(buf, "old") == 0, "output was touched");
	fclose(f);
	oq_model_free(m);
	unlink(out);
	rmdir(dir);
}
