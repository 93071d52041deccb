/* SPDX-License-Identifier: MIT */
/* main: placeholder entry point until the modules are wired (replaced by the core work). */
#include <stdio.h>

int main(void)
{
    puts("beaconmux " BM_VERSION);
    return 0;
}
