"""Two GPU ranks: our one-shot all-reduce equals NCCL's, eagerly and replayed from a CUDA graph, for a
decode-size message, one at the buffer's limit and one above it (NCCL inside the op). Prints one line
per rank: 'rank R one-shot-ok' or what differed. Run by tests/distributed/test_tp_gpu.py."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from accelerate_graph.distributed import all_reduce


def rank_main(rank: int, port: int) -> None:
    os.environ.update(all_reduce.NO_MULTICAST_ENV)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    device = torch.device("cuda", rank)
    all_reduce.set_up("oneshot", device, torch.bfloat16)
    limit = all_reduce.ONE_SHOT_MAX_BYTES // 2
    problems = []
    for shape in ((1, 1, 4096), (8, 1, 4096), (limit,), (2 * limit,)):
        torch.manual_seed(rank)
        x = torch.randn(shape, device=device, dtype=torch.bfloat16)
        expected = x.clone()
        dist.all_reduce(expected)
        if not torch.equal(all_reduce.summed(x), expected):
            problems.append(f"eager {shape}")
        static = x.clone()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            all_reduce.summed(static)  # warm-up outside the capture
            with torch.cuda.graph(graph, stream=stream):
                out = all_reduce.summed(static)
        torch.cuda.current_stream().wait_stream(stream)
        for _ in range(3):  # new inputs each replay: the graph reads them, the peers' too
            fresh = torch.randn(shape, device=device, dtype=torch.bfloat16)
            static.copy_(fresh)
            graph.replay()
            want = fresh.clone()
            dist.all_reduce(want)
            if not torch.equal(out, want):
                problems.append(f"replay {shape}")
                break
        graph.reset()
    torch.cuda.synchronize()
    sys.stdout.write(f"rank {rank} {'one-shot-ok' if not problems else 'differs: ' + ', '.join(problems)}\n")
    sys.stdout.flush()
    dist.barrier(device_ids=[rank])
    os._exit(0 if not problems else 1)  # no communicator teardown to wait for


if __name__ == "__main__":
    mp.spawn(rank_main, args=(int(sys.argv[1]),), nprocs=2)
