/* SPDX-License-Identifier: MIT */
/*
 * beaconsim: a simulated beacon cluster for tests, benchmarks and the demo. This file
 * only parses the command line, wires the runtime to a loop and handles signals; the
 * model is in chain/node, the Beacon API in api*, events in events_out, the control API
 * in control. See docs/beaconsim.md.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/err.h"
#include "base/log.h"
#include "sim.h"

static const char USAGE[] =
    "usage: beaconsim [options]\n"
    "\n"
    "Runs N simulated beacon nodes in one process, each on its own loopback port, all\n"
    "following one ground-truth chain, plus a control API to change their behaviour.\n"
    "Prints one line per node, \"node I http://127.0.0.1:PORT\", then\n"
    "\"control http://HOST:PORT\", before serving.\n"
    "\n"
    "options:\n"
    "  --nodes N              number of nodes, 1..64 (default 3)\n"
    "  --base-port P          node I listens on P+I; 0 picks free ports (default 0)\n"
    "  --host ADDR            address the nodes listen on (default 127.0.0.1)\n"
    "  --control HOST:PORT    control API address (default 127.0.0.1:0, a free port)\n"
    "  --slot-ms MS           slot duration (default 12000)\n"
    "  --genesis-delay-ms MS  genesis this long after start, rounded up to a second (default 0)\n"
    "  --slots-per-epoch N    slots per epoch (default 32)\n"
    "  --fork NAME            fulu (default) or gloas (gloas from genesis)\n"
    "  --gloas-epoch E        schedule the fulu -> gloas transition at epoch E\n"
    "  --skip-rate P          probability that a slot has no block, 0..0.9 (default 0)\n"
    "  --block-tx-bytes N     each block carries one execution transaction of N bytes, for\n"
    "                         larger bodies, 0..16777216 (default 0)\n"
    "  --seed N               seed of every root, skip, jitter and value (default 1)\n"
    "  --validators N         validator count, 1..200000 (default 64)\n"
    "  --node I:SPEC          behaviour of node I (repeatable), SPEC as below\n"
    "  --log-level LEVEL      debug, info, warn, error, off (default info)\n"
    "  --log-format FORMAT    text (default) or json\n"
    "  --help                 this text\n"
    "  --version              print the version\n"
    "\n";

static const char CONTROL_HELP[] =
    "\n"
    "control API (JSON):\n"
    "  GET  /sim/v1/truth                  current slot, canonical head, justified, finalized\n"
    "  GET  /sim/v1/truth?slot=S           root, parent, skipped/late/competing, slot timing\n"
    "  GET  /sim/v1/nodes                  every node: url, head, behaviour\n"
    "  GET  /sim/v1/nodes/I                one node\n"
    "  PUT  /sim/v1/nodes/I                merge behaviour fields, e.g. "
    "{\"lag\":800,\"down\":true},\n"
    "                                      {\"spec\":\"hang,slow=200\"}, {\"reset\":true}\n"
    "  GET  /sim/v1/nodes/I/submissions    what node I received (?since=SEQ); DELETE clears\n"
    "  GET  /sim/v1/nodes/I/requests       request counts per endpoint; DELETE clears\n"
    "  POST /sim/v1/scenario               {\"type\":\"late-block\",\"slot\":S[,\"delay_ms\":D]}\n"
    "                                      {\"type\":\"competing\",\"slot\":S,\"nodes\":[I,...]}\n"
    "                                      {\"type\":\"fork-transition\",\"epoch\":E}\n"
    "                                      {\"type\":\"big-values\",\"enabled\":true}\n";

enum {
    OPT_NODES = 256,
    OPT_BASE_PORT,
    OPT_HOST,
    OPT_CONTROL,
    OPT_SLOT_MS,
    OPT_GENESIS_DELAY,
    OPT_SPE,
    OPT_FORK,
    OPT_GLOAS_EPOCH,
    OPT_SKIP_RATE,
    OPT_TX_BYTES,
    OPT_SEED,
    OPT_VALIDATORS,
    OPT_NODE,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option OPTS[] = {
    {"nodes", required_argument, NULL, OPT_NODES},
    {"base-port", required_argument, NULL, OPT_BASE_PORT},
    {"host", required_argument, NULL, OPT_HOST},
    {"control", required_argument, NULL, OPT_CONTROL},
    {"slot-ms", required_argument, NULL, OPT_SLOT_MS},
    {"genesis-delay-ms", required_argument, NULL, OPT_GENESIS_DELAY},
    {"slots-per-epoch", required_argument, NULL, OPT_SPE},
    {"fork", required_argument, NULL, OPT_FORK},
    {"gloas-epoch", required_argument, NULL, OPT_GLOAS_EPOCH},
    {"skip-rate", required_argument, NULL, OPT_SKIP_RATE},
    {"block-tx-bytes", required_argument, NULL, OPT_TX_BYTES},
    {"seed", required_argument, NULL, OPT_SEED},
    {"validators", required_argument, NULL, OPT_VALIDATORS},
    {"node", required_argument, NULL, OPT_NODE},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int parse_num(const char *flag, const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') {
        fprintf(stderr, "beaconsim: %s needs a number\n", flag);
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "beaconsim: %s must be a number in [%llu, %llu], got \"%s\"\n", flag, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct app {
    uv_loop_t loop;
    bs_sim_t *sim;
    uv_signal_t sigint, sigterm;
    int exit_code;
} app_t;

static void stopped(bs_sim_t *s, void *ud)
{
    (void)s;
    app_t *a = ud;
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
    app_t *a = h->data;
    bm_log(BM_LOG_INFO, "signal %d: stopping", signum);
    bs_sim_stop(a->sim, stopped, a);
}

/* What the command line says, as it is read. */
typedef struct args {
    bs_sim_cfg_t cfg;
    bm_log_level_t level;
    bm_log_format_t format;
    bool fork_gloas, gloas_epoch_set;
    uint64_t gloas_epoch;
    struct {
        unsigned idx;
        const char *spec;
    } specs[256];
    int nspecs;
} args_t;

/* Applies option `c` (its argument: optarg). Returns -1 to go on, else the exit code
 * (0 after --help or --version, 2 on a bad option). */
static int one_option(args_t *a, int c, char **argv)
{
    unsigned long long v;
    switch (c) {
    case OPT_NODES:
        if (parse_num("--nodes", optarg, 1, BS_MAX_NODES, &v))
            return 2;
        a->cfg.nodes = (uint32_t)v;
        break;
    case OPT_BASE_PORT:
        if (parse_num("--base-port", optarg, 0, 65535, &v))
            return 2;
        a->cfg.base_port = (int)v;
        break;
    case OPT_HOST:
        snprintf(a->cfg.host, sizeof a->cfg.host, "%s", optarg);
        break;
    case OPT_CONTROL: {
        const char *colon = strrchr(optarg, ':');
        if (!colon || colon == optarg || (size_t)(colon - optarg) >= sizeof a->cfg.control_host) {
            fprintf(stderr, "beaconsim: --control needs HOST:PORT, got \"%s\"\n", optarg);
            return 2;
        }
        memcpy(a->cfg.control_host, optarg, (size_t)(colon - optarg));
        a->cfg.control_host[colon - optarg] = 0;
        if (parse_num("--control port", colon + 1, 0, 65535, &v))
            return 2;
        a->cfg.control_port = (int)v;
        break;
    }
    case OPT_SLOT_MS:
        if (parse_num("--slot-ms", optarg, 100, 3600000, &v))
            return 2;
        a->cfg.chain.slot_ms = (uint32_t)v;
        break;
    case OPT_GENESIS_DELAY:
        if (parse_num("--genesis-delay-ms", optarg, 0, 86400000, &v))
            return 2;
        a->cfg.genesis_delay_ms = (uint32_t)v;
        break;
    case OPT_SPE:
        if (parse_num("--slots-per-epoch", optarg, 1, 1024, &v))
            return 2;
        a->cfg.chain.slots_per_epoch = (uint32_t)v;
        break;
    case OPT_FORK:
        if (strcmp(optarg, "gloas") == 0) {
            a->fork_gloas = true;
        } else if (strcmp(optarg, "fulu") == 0) {
            a->fork_gloas = false;
        } else {
            fprintf(stderr, "beaconsim: --fork must be fulu or gloas, got \"%s\"\n", optarg);
            return 2;
        }
        break;
    case OPT_GLOAS_EPOCH:
        if (parse_num("--gloas-epoch", optarg, 0, 1000000000, &v))
            return 2;
        a->gloas_epoch = v;
        a->gloas_epoch_set = true;
        break;
    case OPT_SKIP_RATE: {
        char *end;
        double p = strtod(optarg, &end);
        if (*end || !(p >= 0 && p <= 0.9)) {
            fprintf(stderr, "beaconsim: --skip-rate must be in [0, 0.9], got \"%s\"\n", optarg);
            return 2;
        }
        a->cfg.chain.skip_rate = p;
        break;
    }
    case OPT_TX_BYTES:
        if (parse_num("--block-tx-bytes", optarg, 0, 16u << 20, &v))
            return 2;
        a->cfg.chain.tx_bytes = (uint32_t)v;
        break;
    case OPT_SEED:
        if (parse_num("--seed", optarg, 0, UINT64_MAX, &v))
            return 2;
        a->cfg.chain.seed = v;
        break;
    case OPT_VALIDATORS:
        if (parse_num("--validators", optarg, 1, 200000, &v))
            return 2;
        a->cfg.chain.validators = (uint32_t)v;
        break;
    case OPT_NODE: {
        const char *colon = strchr(optarg, ':');
        char idx[16];
        if (!colon || colon == optarg || (size_t)(colon - optarg) >= sizeof idx) {
            fprintf(stderr, "beaconsim: --node needs I:SPEC, got \"%s\"\n", optarg);
            return 2;
        }
        memcpy(idx, optarg, (size_t)(colon - optarg));
        idx[colon - optarg] = 0;
        if (parse_num("--node index", idx, 0, BS_MAX_NODES - 1, &v))
            return 2;
        if (a->nspecs == 256) {
            fprintf(stderr, "beaconsim: too many --node options\n");
            return 2;
        }
        a->specs[a->nspecs].idx = (unsigned)v;
        a->specs[a->nspecs].spec = colon + 1;
        a->nspecs++;
        break;
    }
    case OPT_LOG_LEVEL:
        if (bm_log_level_parse(optarg, &a->level)) {
            fprintf(stderr, "beaconsim: bad --log-level \"%s\"\n", optarg);
            return 2;
        }
        break;
    case OPT_LOG_FORMAT:
        if (bm_log_format_parse(optarg, &a->format)) {
            fprintf(stderr, "beaconsim: bad --log-format \"%s\"\n", optarg);
            return 2;
        }
        break;
    case OPT_HELP:
        fputs(USAGE, stdout);
        fputs(bs_behav_help, stdout);
        fputs(CONTROL_HELP, stdout);
        return 0;
    case OPT_VERSION:
        printf("beaconsim %s\n", BM_VERSION);
        return 0;
    default:
        fprintf(stderr, "beaconsim: unknown or incomplete option \"%s\" (see --help)\n",
                argv[optind - 1]);
        return 2;
    }
    return -1;
}

/* Reads the command line into `a`. Returns -1 to run, else the exit code. */
static int parse_args(args_t *a, int argc, char **argv)
{
    bs_sim_cfg_default(&a->cfg);
    a->level = BM_LOG_INFO;
    a->format = BM_LOG_TEXT;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", OPTS, NULL)) != -1) {
        int rc = one_option(a, c, argv);
        if (rc >= 0)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "beaconsim: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return 2;
    }
    for (int i = 0; i < a->nspecs; i++) {
        if (a->specs[i].idx >= a->cfg.nodes) {
            fprintf(stderr, "beaconsim: --node %u: there are only %u nodes\n", a->specs[i].idx,
                    a->cfg.nodes);
            return 2;
        }
        bs_behav_t b;
        char err[256];
        if (bs_behav_parse(a->specs[i].spec, &b, err, sizeof err)) {
            fprintf(stderr, "beaconsim: --node %u: %s\n", a->specs[i].idx, err);
            return 2;
        }
        bs_behav_merge(&a->cfg.behav[a->specs[i].idx], &b);
    }
    if (a->fork_gloas)
        a->cfg.chain.gloas_epoch = 0;
    if (a->gloas_epoch_set)
        a->cfg.chain.gloas_epoch = a->gloas_epoch;
    if (a->cfg.chain.validators < a->cfg.chain.slots_per_epoch)
        bm_log(BM_LOG_WARN, "fewer validators than slots per epoch: some slots have no attesters");
    return -1;
}

int main(int argc, char **argv)
{
    static args_t args; /* large (the --node list): not on the stack */
    int exit_code = parse_args(&args, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    bs_sim_cfg_t cfg = args.cfg;
    bm_log_setup(args.level, args.format, NULL);
    signal(SIGPIPE, SIG_IGN);

    app_t a;
    memset(&a, 0, sizeof a);
    if (uv_loop_init(&a.loop) != 0) {
        fprintf(stderr, "beaconsim: cannot create the event loop\n");
        return 1;
    }
    a.sim = bs_sim_new(&a.loop, &cfg);
    if (!a.sim) {
        fprintf(stderr, "beaconsim: cannot create the simulation (out of memory?)\n");
        return 1;
    }
    uv_signal_init(&a.loop, &a.sigint);
    uv_signal_init(&a.loop, &a.sigterm);
    a.sigint.data = a.sigterm.data = &a;
    int rc = bs_sim_start(a.sim);
    if (rc) {
        fprintf(stderr, "beaconsim: cannot start: %s\n", bm_strerror(rc));
        a.exit_code = 1;
        bs_sim_stop(a.sim, stopped, &a);
    } else {
        uv_signal_start(&a.sigint, on_signal, SIGINT);
        uv_signal_start(&a.sigterm, on_signal, SIGTERM);
        for (uint32_t i = 0; i < a.sim->nnodes; i++)
            printf("node %u http://%s:%d\n", i, cfg.host, a.sim->nodes[i].port);
        printf("control http://%s:%d\n", cfg.control_host, a.sim->control_port);
        fflush(stdout);
        const bs_chain_cfg_t *cc = bs_chain_config(a.sim->chain);
        bm_log(BM_LOG_INFO,
               "beaconsim %s: %u nodes, genesis %llu, slot %u ms, %u slots per epoch, seed %llu",
               BM_VERSION, a.sim->nnodes, (unsigned long long)cc->genesis_ms, cc->slot_ms,
               cc->slots_per_epoch, (unsigned long long)cc->seed);
    }
    uv_run(&a.loop, UV_RUN_DEFAULT);
    bs_sim_free(a.sim);
    if (uv_loop_close(&a.loop) != 0)
        bm_log(BM_LOG_WARN, "event loop closed with handles still open");
    return a.exit_code;
}
