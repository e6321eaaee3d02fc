#include "test.h"
void test_client(void) {}
