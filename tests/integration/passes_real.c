/*
 * passes_real.c - the rewrite passes cleanup, fold-bn, cle and fuse on real
 * models: the PaddleOCR cls/det/rec exports (fetch.sh) and the torchvision
 * exports of torchvision_export.py (BatchNormalization kept, weights wrapped
 * in Identity), all in $OQ_CACHE (default $OQ_SOURCE_DIR/.cache). A model
 * that is not there is skipped, naming the file.
 *
 * Each model runs in onnxq's executor before and after the passes on the
 * same input (the torchvision photo input.npy, or pseudo-random values for
 * the OCR models); after the passes no BatchNormalization or Identity may
 * remain and the outputs must match within 1e-4 relative (max|a-b| /
 * max|a|). The reference is the executor on the unmodified model. Run by
 * criterion.sh.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/pass.h"
#include "runmodel.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"

/* $OQ_CACHE/rel (default $OQ_SOURCE_DIR/.cache/rel, or ./.cache/rel). */
static void cache_path(char *buf, size_t cap, const char *rel)
{
	const char *c = getenv("OQ_CACHE"), *s = getenv("OQ_SOURCE_DIR");
	if (c)
		snprintf(buf, cap, "%s/%s", c, rel);
	else
		snprintf(buf, cap, "%s/.cache/%s", s ? s : ".", rel);
}

/* Runs cleanup,fold-bn,cle,fuse on the model at `rel`; the outputs must match the original's.
 * Input: the .npy at `npy`, or pseudo-random values with symbolic dims `sym` when NULL. */
static void real_model(const char *rel, const char *npy, int64_t sym)
{
	char path[1024];
	oq_model *m = NULL;
	oq_diag d;
	oq_rt in[4] = {{0}}, a[8] = {{0}}, b[8] = {{0}};
	oq_pass_run r = {0};
	oq_opts o;
	size_t nin, na, nb;
	uint64_t rng;

	cache_path(path, sizeof path, rel);
	if (access(path, R_OK) != 0) {
		cr_skip_test("%s not found (tests/integration/fetch.sh, torchvision_export.py)", path);
		return;
	}
	oq_diag_init(&d);
	cr_assert_eq(oq_model_load(path, &m, &d), OQ_OK, "%s", d.msg);
	if (npy) {
		oq_npy arr = {0};
		char np[1024];
		cache_path(np, sizeof np, npy);
		cr_assert_eq(oq_npy_read(np, 0, &arr, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_rt_alloc(&in[0], arr.dtype, arr.rank, arr.dims), OQ_OK);
		memcpy(in[0].data, arr.data, arr.nbytes);
		oq_npy_free(&arr);
		nin = 1;
	} else {
		cr_assert_eq(runmodel_inputs(m, &rng, sym, in, 4, &nin, &d), OQ_OK, "%s", d.msg);
	}
	cr_assert_eq(runmodel_run(m, in, nin, a, 8, &na, &d), OQ_OK, "run: %s", d.msg);
	size_t bn0 = runmodel_count_op(m->graph, "BatchNormalization");
	size_t id0 = runmodel_count_op(m->graph, "Identity");
	oq_opts_init(&o);
	r.list = "cleanup,fold-bn,cle,fuse";
	r.verify = 1;
	cr_assert_eq(oq_passes_run(m, &r, &o, &d), OQ_OK, "passes: %s", d.msg);
	size_t bn1 = runmodel_count_op(m->graph, "BatchNormalization");
	size_t id1 = runmodel_count_op(m->graph, "Identity");
	cr_assert_eq(runmodel_run(m, in, nin, b, 8, &nb, &d), OQ_OK, "run: %s", d.msg);
	cr_assert_eq(na, nb);
	double err = runmodel_rel_err(a, b, na);
	size_t n_int = 0, n_out = 0, n_act = 0;
	for (size_t i = 0; i < m->graph->n_values; i++) {
		n_int += (m->graph->values[i]->qmark & OQ_QM_INTERNAL) != 0;
		n_out += (m->graph->values[i]->qmark & OQ_QM_UNIT_OUT) != 0;
	}
	for (size_t i = 0; i < m->graph->n_nodes; i++)
		n_act += (m->graph->nodes[i]->qmark & OQ_QM_ACT) != 0;
	fprintf(stderr,
		"%s: BN %zu -> %zu, Identity %zu -> %zu, Constant left %zu, marks: %zu internal, %zu unit-out, "
		"%zu fused acts; rel err %.3g\n",
		rel, bn0, bn1, id0, id1, runmodel_count_op(m->graph, "Constant"), n_int, n_out, n_act, err);
	cr_expect_eq(bn1, 0, "%s: %zu BatchNormalization left", rel, bn1);
	cr_expect_eq(id1, 0, "%s: %zu Identity left", rel, id1);
	cr_expect_lt(err, 1e-4, "%s: relative error %g", rel, err);
	for (size_t i = 0; i < 8; i++) {
		oq_rt_release(&a[i]);
		oq_rt_release(&b[i]);
	}
	for (size_t i = 0; i < 4; i++)
		oq_rt_release(&in[i]);
	oq_model_free(m);
}

Test(real, ocr_cls, .timeout = 600) { real_model("ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", NULL, 48); }
Test(real, ocr_det, .timeout = 600) { real_model("ocr/ch_PP-OCRv4_det_infer.onnx", NULL, 64); }
Test(real, ocr_rec, .timeout = 600) { real_model("ocr/ch_PP-OCRv4_rec_infer.onnx", NULL, 160); }
Test(real, tv_resnet18, .timeout = 600) { real_model("tv/resnet18.onnx", "tv/input.npy", 0); }
Test(real, tv_mobilenet_v2, .timeout = 600) { real_model("tv/mobilenet_v2.onnx", "tv/input.npy", 0); }
Test(real, tv_mobilenet_v3, .timeout = 600) { real_model("tv/mobilenet_v3_small.onnx", "tv/input.npy", 0); }
Test(real, tv_efficientnet_b0, .timeout = 600) { real_model("tv/efficientnet_b0.onnx", "tv/input.npy", 0); }
Test(real, tv_squeezenet, .timeout = 600) { real_model("tv/squeezenet1_1.onnx", "tv/input.npy", 0); }
Test(real, tv_vit_b_16, .timeout = 900) { real_model("tv/vit_b_16.onnx", "tv/input.npy", 0); }
