/* The C client's unit tests: a plain runner whose last line is "N passed, N failed". */
#include "test.h"

#include <stdio.h>

int test_passed, test_failed;

void test_vectors(void);
void test_json(void);
void test_client(void);
#ifdef VRT_WITH_OPUS
void test_opus(void);
#endif

int main(void) {
    test_json();
    test_vectors();
    test_client();
#ifdef VRT_WITH_OPUS
    test_opus();
#endif
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}
