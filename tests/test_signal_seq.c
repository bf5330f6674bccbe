/*
 * test_signal_seq.c - the signal, vision and sequence kernel families
 * (calib/kernels/signal.c, vision.c, sequence.c) on small
 * graphs with hand-computed results: DFT of [1, 2, 3, 4] (full, onesided,
 * truncated, inverse), Det with a pivot swap and a singular matrix, window
 * values, NonMaxSuppression tie-breaking and zero-area boxes, GridSample's
 * half-to-even nearest rounding, the sequence ops that the ONNX node tests
 * do not reach (SplitToSequence, SequenceErase, ConcatFromSequence with
 * new_axis), and the errors: bad positions, bad modes, a sequence fed to a
 * tensor op, MaxUnpool indices outside the output.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"

#define NMAX 8

/* A graph under construction and its runtime inputs. */
typedef struct tg {
	gen_model *g;
	Onnx__GraphProto *mg;
	oq_rt in[NMAX];
	size_t nin;
} tg;

static void tg_init(tg *t, int opset)
{
	memset(t, 0, sizeof *t);
	t->g = gen_new(10);
	gen_opset(t->g, "", opset);
	t->mg = gen_graph(t->g);
}

/* A graph input `name` fed with the given values. */
static void tg_in(tg *t, const char *name, int dt, int rank, const int64_t *dims, const double *v)
{
	oq_rt *r = &t->in[t->nin++];
	cr_assert_eq(oq_rt_alloc(r, dt, rank, dims), OQ_OK);
	for (size_t i = 0; i < r->nelem; i++)
		oq_rt_set(r, i, v[i]);
	gen_input(t->g, t->mg, name, dt, rank, dims);
}

/* Runs the graph with outputs `names` (comma separated) into out[]; returns the status, message in msg. */
static int tg_run(tg *t, const char *names, oq_rt *out, size_t nout, char *msg, int threads)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_diag d;
	oq_exec_opts o = {.threads = threads};
	char buf[256], *save = NULL;
	int rc;

	oq_diag_init(&d);
	snprintf(buf, sizeof buf, "%s", names);
	for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save))
		gen_output(t->g, t->mg, p, 0, -1, NULL);
	rc = gen_load(t->g, &m, &d);
	if (!rc)
		rc = oq_exec_new(m, &o, &e, &d);
	if (!rc)
		rc = oq_exec_run(e, t->in, t->nin, out, nout, &d);
	snprintf(msg, 1024, "%s", d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(t->g);
	for (size_t i = 0; i < t->nin; i++)
		oq_rt_release(&t->in[i]);
	return rc;
}

#define RUN_OK(t, names, out, n)                                                \
	do {                                                                    \
		char m_[1024];                                                  \
		int rc_ = tg_run(t, names, out, n, m_, 1);                      \
		cr_assert_eq(rc_, OQ_OK, "run failed: %s", m_);                 \
	} while (0)

/* Checks a tensor (dtype, shape, |got - want| <= tol) and releases it. */
static void expect(oq_rt *y, int dt, int rank, const int64_t *dims, const double *want, double tol)
{
	char s[128];
	cr_assert_eq(y->kind, OQ_RT_TENSOR, "got %s", oq_rt_describe(y, s, sizeof s));
	cr_assert_eq(y->dtype, dt, "dtype of %s", oq_rt_describe(y, s, sizeof s));
	cr_assert_eq(y->rank, rank, "rank of %s", oq_rt_describe(y, s, sizeof s));
	for (int i = 0; i < rank; i++)
		cr_assert_eq(y->dims[i], dims[i], "shape %s", oq_rt_describe(y, s, sizeof s));
	for (size_t i = 0; i < y->nelem; i++)
		cr_assert(fabs(oq_rt_get(y, i) - want[i]) <= tol, "element %zu: got %.17g, want %.17g", i,
			  oq_rt_get(y, i), want[i]);
	oq_rt_release(y);
}
#define EXPECT(y, dt, shape, tol, ...) expect(y, dt, GEN_SHAPE shape, GEN_VALS(__VA_ARGS__), tol)

/* ------------------------------------------------------------ signal */

Test(signal, dft_forms)
{
	tg t;
	oq_rt y[4];
	Onnx__NodeProto *n;

	/* X[k] = sum x[j] e^{-2 pi i jk/4}: 10, -2+2i, -2, -2-2i */
	tg_init(&t, 17);
	tg_in(&t, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), GEN_VALS(1, 2, 3, 4));
	gen_init(t.g, t.mg, "two", OQ_DT_INT64, 0, NULL, GEN_VALS(2));
	gen_node(t.g, t.mg, "DFT", "full", "x", "f");
	n = gen_node(t.g, t.mg, "DFT", "half", "x", "h");
	gen_attr_int(t.g, n, "onesided", 1);
	gen_node(t.g, t.mg, "DFT", "trunc", "x,two", "tr"); /* [1, 2] -> 3, -1 */
	n = gen_node(t.g, t.mg, "DFT", "inv", "f", "back");
	gen_attr_int(t.g, n, "inverse", 1);
	RUN_OK(&t, "f,h,tr,back", y, 4);
	EXPECT(&y[0], OQ_DT_FLOAT, (1, 4, 2), 1e-6, 10, 0, -2, 2, -2, 0, -2, -2);
	EXPECT(&y[1], OQ_DT_FLOAT, (1, 3, 2), 1e-6, 10, 0, -2, 2, -2, 0);
	EXPECT(&y[2], OQ_DT_FLOAT, (1, 2, 2), 1e-6, 3, 0, -1, 0);
	EXPECT(&y[3], OQ_DT_FLOAT, (1, 4, 2), 1e-6, 1, 0, 2, 0, 3, 0, 4, 0);
}

Test(signal, det_pivot_and_singular)
{
	tg t;
	oq_rt y[2];
	tg_init(&t, 13);
	/* 1*4 - 2*3 = -2; rows 2 and 4 proportional: 0 */
	tg_in(&t, "a", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 2), GEN_VALS(1, 2, 3, 4, 1, 2, 2, 4));
	/* a permutation (one swap) times 2: -2; needs a pivot since a[0][0] = 0 */
	tg_in(&t, "b", OQ_DT_DOUBLE, GEN_SHAPE(3, 3), GEN_VALS(0, 1, 0, 1, 0, 0, 0, 0, 2));
	gen_node(t.g, t.mg, "Det", "d1", "a", "da");
	gen_node(t.g, t.mg, "Det", "d2", "b", "db");
	RUN_OK(&t, "da,db", y, 2);
	EXPECT(&y[0], OQ_DT_FLOAT, (2), 1e-6, -2, 0);
	expect(&y[1], OQ_DT_DOUBLE, 0, NULL, GEN_VALS(-2), 0);
}

Test(signal, windows)
{
	tg t;
	oq_rt y[3];
	Onnx__NodeProto *n;
	tg_init(&t, 17);
	gen_init(t.g, t.mg, "four", OQ_DT_INT64, 0, NULL, GEN_VALS(4));
	gen_init(t.g, t.mg, "three", OQ_DT_INT32, 0, NULL, GEN_VALS(3));
	/* periodic Hann, N = 4: 0.5 - 0.5 cos(2 pi n / 4) */
	gen_node(t.g, t.mg, "HannWindow", "h", "four", "hw");
	/* symmetric Hamming, N = 2: 25/46 - 21/46 cos(pi n) = 4/46, 1, 4/46; as double */
	n = gen_node(t.g, t.mg, "HammingWindow", "m", "three", "mw");
	gen_attr_int(t.g, n, "periodic", 0);
	gen_attr_int(t.g, n, "output_datatype", OQ_DT_DOUBLE);
	/* symmetric Blackman, N = 2: 0.42 - 0.5 cos(pi n) + 0.08 cos(2 pi n) = 0, 1, 0 */
	n = gen_node(t.g, t.mg, "BlackmanWindow", "b", "three", "bw");
	gen_attr_int(t.g, n, "periodic", 0);
	RUN_OK(&t, "hw,mw,bw", y, 3);
	EXPECT(&y[0], OQ_DT_FLOAT, (4), 1e-7, 0, 0.5, 1, 0.5);
	EXPECT(&y[1], OQ_DT_DOUBLE, (3), 1e-15, 4.0 / 46, 1, 4.0 / 46);
	EXPECT(&y[2], OQ_DT_FLOAT, (3), 1e-7, 0, 1, 0);
}

/* ------------------------------------------------------------ vision */

Test(vision, nms_ties_zero_area_threshold)
{
	tg t;
	oq_rt y[2];
	tg_init(&t, 11);
	/* boxes 0 and 1 identical with equal scores (IoU 1): the lower index stays; box 2 has no area */
	tg_in(&t, "boxes", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 4), GEN_VALS(0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0));
	tg_in(&t, "scores", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 3), GEN_VALS(0.9, 0.9, 0.8));
	gen_init(t.g, t.mg, "maxo", OQ_DT_INT64, 1, (int64_t[]){1}, GEN_VALS(3));
	gen_init(t.g, t.mg, "iou", OQ_DT_FLOAT, 1, (int64_t[]){1}, GEN_VALS(0.5));
	gen_init(t.g, t.mg, "sthr", OQ_DT_FLOAT, 1, (int64_t[]){1}, GEN_VALS(0.85));
	gen_node(t.g, t.mg, "NonMaxSuppression", "a", "boxes,scores,maxo,iou", "all");
	gen_node(t.g, t.mg, "NonMaxSuppression", "b", "boxes,scores,maxo,iou,sthr", "thr");
	RUN_OK(&t, "all,thr", y, 2);
	EXPECT(&y[0], OQ_DT_INT64, (2, 3), 0, 0, 0, 0, 0, 0, 2);
	EXPECT(&y[1], OQ_DT_INT64, (1, 3), 0, 0, 0, 0);
}

Test(vision, gridsample_nearest_half_to_even)
{
	tg t;
	oq_rt y;
	Onnx__NodeProto *n;
	tg_init(&t, 16);
	tg_in(&t, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 4), GEN_VALS(10, 20, 30, 40));
	/* align_corners 0: sx = ((gx + 1) * 4 - 1) / 2 = 0.5, 1.5, 2.5 -> 0, 2, 2 (ties to even) */
	tg_in(&t, "g", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 3, 2), GEN_VALS(-0.5, 0, 0, 0, 0.5, 0));
	n = gen_node(t.g, t.mg, "GridSample", "s", "x,g", "y");
	gen_attr_str(t.g, n, "mode", "nearest");
	RUN_OK(&t, "y", &y, 1);
	EXPECT(&y, OQ_DT_FLOAT, (1, 1, 1, 3), 0, 10, 30, 30);
}

Test(vision, errors)
{
	tg t;
	oq_rt y;
	char msg[1024];
	Onnx__NodeProto *n;

	tg_init(&t, 16);
	tg_in(&t, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2), GEN_VALS(1, 2));
	tg_in(&t, "g", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2), GEN_VALS(0, 0));
	n = gen_node(t.g, t.mg, "GridSample", "s", "x,g", "y");
	gen_attr_str(t.g, n, "mode", "area");
	cr_assert_eq(tg_run(&t, "y", &y, 1, msg, 1), OQ_EINVAL);
	cr_assert(strstr(msg, "mode 'area'"), "%s", msg);

	/* index 4 in a [1, 1, 2, 2] output */
	tg_init(&t, 11);
	tg_in(&t, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(5));
	tg_in(&t, "i", OQ_DT_INT64, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(4));
	n = gen_node(t.g, t.mg, "MaxUnpool", "u", "x,i", "y");
	gen_attr_ints(t.g, n, "kernel_shape", 2, (int64_t[]){2, 2});
	cr_assert_eq(tg_run(&t, "y", &y, 1, msg, 1), OQ_EINVAL);
	cr_assert(strstr(msg, "outside the output"), "%s", msg);

	/* a NaN roi with an adaptive grid (sampling_ratio 0): an error, not a NaN cast to an integer
	 * (found by fuzz_quantize) */
	tg_init(&t, 16);
	tg_in(&t, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 2, 2), GEN_VALS(1, 2, 3, 4));
	tg_in(&t, "r", OQ_DT_FLOAT, GEN_SHAPE(1, 4), GEN_VALS(0, 0, NAN, 1));
	tg_in(&t, "b", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(0));
	gen_node(t.g, t.mg, "RoiAlign", "ra", "x,r,b", "y");
	cr_assert_eq(tg_run(&t, "y", &y, 1, msg, 1), OQ_EINVAL);
	cr_assert(strstr(msg, "sampling grid out of range"), "%s", msg);
}

/* ------------------------------------------------------------ sequences */

Test(seq, construct_erase_length_concat)
{
	tg t;
	oq_rt y[4];
	Onnx__NodeProto *n;
	tg_init(&t, 13);
	tg_in(&t, "a", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 2));
	tg_in(&t, "b", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(3, 4));
	tg_in(&t, "c", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(5, 6));
	gen_init(t.g, t.mg, "m2", OQ_DT_INT64, 0, NULL, GEN_VALS(-2));
	gen_node(t.g, t.mg, "SequenceConstruct", "s", "a,b,c", "s");
	gen_node(t.g, t.mg, "SequenceErase", "e", "s,m2", "e"); /* drops b */
	gen_node(t.g, t.mg, "SequenceLength", "l", "e", "len");
	n = gen_node(t.g, t.mg, "ConcatFromSequence", "cat", "e", "cat");
	gen_attr_int(t.g, n, "axis", 0);
	n = gen_node(t.g, t.mg, "ConcatFromSequence", "stk", "e", "stk");
	gen_attr_int(t.g, n, "axis", -1);
	gen_attr_int(t.g, n, "new_axis", 1);
	RUN_OK(&t, "len,cat,stk,e", y, 4);
	expect(&y[0], OQ_DT_INT64, 0, NULL, GEN_VALS(2), 0);
	EXPECT(&y[1], OQ_DT_FLOAT, (4), 0, 1, 2, 5, 6);
	EXPECT(&y[2], OQ_DT_FLOAT, (2, 2), 0, 1, 5, 2, 6);
	cr_assert_eq(y[3].kind, OQ_RT_SEQ);
	cr_assert_eq(y[3].n_items, 2);
	EXPECT(&y[3].items[1], OQ_DT_FLOAT, (2), 0, 5, 6);
	oq_rt_release(&y[3]);
}

Test(seq, split_to_sequence)
{
	tg t;
	oq_rt y[3];
	Onnx__NodeProto *n;
	tg_init(&t, 13);
	tg_in(&t, "x", OQ_DT_INT32, GEN_SHAPE(2, 5), GEN_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
	gen_init(t.g, t.mg, "two", OQ_DT_INT64, 0, NULL, GEN_VALS(2));
	gen_init(t.g, t.mg, "last", OQ_DT_INT32, 0, NULL, GEN_VALS(-1));
	gen_init(t.g, t.mg, "one", OQ_DT_INT64, 0, NULL, GEN_VALS(1));
	/* chunks of 2 along axis 1: widths 2, 2, 1 */
	n = gen_node(t.g, t.mg, "SplitToSequence", "s", "x,two", "s");
	gen_attr_int(t.g, n, "axis", 1);
	gen_node(t.g, t.mg, "SequenceAt", "a", "s,last", "tail");
	gen_node(t.g, t.mg, "SequenceLength", "l", "s", "n");
	/* no split: pieces of 1 along axis 0, keepdims 0 drops the axis */
	n = gen_node(t.g, t.mg, "SplitToSequence", "r", "x", "rows");
	gen_attr_int(t.g, n, "keepdims", 0);
	gen_node(t.g, t.mg, "SequenceAt", "b", "rows,one", "row1");
	RUN_OK(&t, "tail,n,row1", y, 3);
	EXPECT(&y[0], OQ_DT_INT32, (2, 1), 0, 4, 9);
	expect(&y[1], OQ_DT_INT64, 0, NULL, GEN_VALS(3), 0);
	EXPECT(&y[2], OQ_DT_INT32, (5), 0, 5, 6, 7, 8, 9);
}

Test(seq, insert_optional_and_errors)
{
	tg t;
	oq_rt y[2];
	char msg[1024];

	tg_init(&t, 18);
	tg_in(&t, "a", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	tg_in(&t, "b", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(2));
	gen_init(t.g, t.mg, "zero", OQ_DT_INT64, 0, NULL, GEN_VALS(0));
	gen_node(t.g, t.mg, "SequenceConstruct", "s", "a", "s");
	gen_node(t.g, t.mg, "SequenceInsert", "i", "s,b,zero", "s2"); /* [b, a] */
	gen_node(t.g, t.mg, "SequenceAt", "at", "s2,zero", "first");
	gen_node(t.g, t.mg, "OptionalHasElement", "h", "", "has"); /* no input: false */
	RUN_OK(&t, "first,has", y, 2);
	EXPECT(&y[0], OQ_DT_FLOAT, (1), 0, 2);
	expect(&y[1], OQ_DT_BOOL, 0, NULL, GEN_VALS(0), 0);

	/* position 1 of a one-item sequence */
	tg_init(&t, 13);
	tg_in(&t, "a", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	gen_init(t.g, t.mg, "one", OQ_DT_INT64, 0, NULL, GEN_VALS(1));
	gen_node(t.g, t.mg, "SequenceConstruct", "s", "a", "s");
	gen_node(t.g, t.mg, "SequenceAt", "at", "s,one", "y");
	cr_assert_eq(tg_run(&t, "y", y, 1, msg, 1), OQ_EINVAL);
	cr_assert(strstr(msg, "position 1 is outside [-1, 0]"), "%s", msg);

	/* a sequence into a tensor op */
	tg_init(&t, 13);
	tg_in(&t, "a", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	gen_node(t.g, t.mg, "SequenceConstruct", "s", "a", "s");
	gen_node(t.g, t.mg, "Relu", "r", "s", "y");
	cr_assert_eq(tg_run(&t, "y", y, 1, msg, 1), OQ_EINVAL);
	cr_assert(strstr(msg, "input 's' is a sequence, not a tensor"), "%s", msg);
}
