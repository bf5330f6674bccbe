/*
 * weight_only_driver.c - the weight-only path of `onnxq quantize
 * --weight-only` as a small program, for bench/weight_only_rss.sh until the
 * CLI wires it: load (external data stays mmapped and borrowed), raise the
 * opset (upgrade-opset), quantize every MatMul/Gemm weight to a DQ'd
 * integer initializer (oq_quantize_weight_only), save.
 *
 * It prints the peak RSS after each stage (getrusage ru_maxrss), so the
 * bench can show where memory goes: the float weights are read in place
 * from the mapping and their pages are given back once quantized, so the
 * peak should follow the quantized output, not the model size.
 *
 * usage: weight_only_driver IN OUT [int4|uint4|int8|uint8] [block|channel|tensor] [BLOCK]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "src/io/onnx_io.h"
#include "passes/pass.h"
#include "passes/quantize/qweight.h"

static long peak_mb(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return ru.ru_maxrss / 1024;
}

int main(int argc, char **argv)
{
	oq_model *m = NULL;
	oq_opts o;
	oq_diag d;
	oq_save_info info;
	int rc, changed = 0;

	if (argc < 3 || argc > 6) {
		fprintf(stderr, "usage: weight_only_driver IN OUT [int4|uint4|int8|uint8] "
		                "[block|channel|tensor] [BLOCK]\n");
		return 1;
	}
	oq_opts_init(&o);
	o.weight_only = 1;
	o.weight_type = OQ_DT_INT4;
	o.granularity = OQ_GRAN_BLOCK;
	o.block_size = 32;
	if (argc > 3 && (o.weight_type = oq_dtype_from_name(argv[3])) < 0) {
		fprintf(stderr, "weight_only_driver: unknown weight type %s\n", argv[3]);
		return 1;
	}
	if (argc > 4)
		o.granularity = !strcmp(argv[4], "channel")  ? OQ_GRAN_CHANNEL
		                : !strcmp(argv[4], "tensor") ? OQ_GRAN_TENSOR
		                                             : OQ_GRAN_BLOCK;
	if (argc > 5)
		o.block_size = strtol(argv[5], NULL, 10);
	o.log = getenv("OQ_VERBOSE") ? stderr : NULL;
	oq_diag_init(&d);
	if ((rc = oq_model_load(argv[1], &m, &d)))
		goto fail;
	fprintf(stderr, "weight_only_driver: loaded, peak RSS %ld MB\n", peak_mb());
	if ((rc = oq_pass_upgrade_opset(m->graph, &o, &d, &changed)))
		goto fail;
	if ((rc = oq_quantize_weight_only(m->graph, &o, &d, &changed)))
		goto fail;
	fprintf(stderr, "weight_only_driver: quantized, peak RSS %ld MB\n", peak_mb());
	if ((rc = oq_model_save(m, argv[2], NULL, &info, &d)))
		goto fail;
	fprintf(stderr, "weight_only_driver: saved %zu + %zu bytes, peak RSS %ld MB\n",
	        info.model_bytes, info.data_bytes, peak_mb());
	oq_model_free(m);
	return 0;
fail:
	fprintf(stderr, "weight_only_driver: %s\n", d.msg);
	oq_model_free(m);
	return oq_exit_code(rc);
}
