/* keeps oq_test_util non-empty */
typedef int oq_test_util_empty;
