// C = A x A with CombBLAS's Sparse SUMMA (Mult_AnXBn_Synch), for bench/vs_combblas.py.
//
//   mpirun -n P combblas_spgemm MATRIX.mtx plus_times|min_plus REPEAT
//
// P must be a perfect square (CombBLAS runs a sqrt(P) x sqrt(P) grid). Reads a general Matrix
// Market file with values (ParallelReadMM, 1-based), multiplies REPEAT + 1 times (the first is a
// warm-up) and prints one JSON line on rank 0: seconds per multiply (MPI_Wtime between barriers),
// nnz(C) and the sum of C's values (the checksum bench/vs_combblas.py compares with ours).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "CombBLAS/CombBLAS.h"

using namespace combblas;
typedef SpDCCols<int64_t, double> LocalMatrix;
typedef SpParMat<int64_t, double, LocalMatrix> ParMatrix;

// CombBLAS 1.6.2's MinPlusSRing multiplies through inf_plus, which does not compile with double
// operands in Debian's package, so min_plus is defined here: add = min, multiply = +, identity +inf.
struct MinPlusDouble {
  static double id() { return std::numeric_limits<double>::infinity(); }
  static bool returnedSAID() { return false; }
  static MPI_Op mpi_op() { return MPI_MIN; }
  static double add(const double& a, const double& b) { return std::min(a, b); }
  static double multiply(const double& a, const double& b) { return a + b; }
  static void axpy(double a, const double& x, double& y) { y = std::min(y, a + x); }
};

template <typename Semiring>
static void run(ParMatrix& a, int repeat, int rank, int ranks, const char* name) {
  std::vector<double> seconds;
  int64_t nnz = 0;
  double checksum = 0.0;
  for (int r = 0; r <= repeat; ++r) {
    ParMatrix b(a);  // Mult_AnXBn_Synch must not be given aliasing operands
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    ParMatrix c = Mult_AnXBn_Synch<Semiring, double, LocalMatrix>(a, b);
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - start;
    if (r > 0) seconds.push_back(elapsed);
    if (r == repeat) {
      nnz = c.getnnz();
      FullyDistVec<int64_t, double> sums = c.Reduce(Column, std::plus<double>(), 0.0);
      checksum = sums.Reduce(std::plus<double>(), 0.0);
    }
  }
  if (rank == 0) {
    std::printf("{\"semiring\": \"%s\", \"ranks\": %d, \"nnz\": %lld, \"checksum\": %.17g, \"seconds\": [", name, ranks,
                static_cast<long long>(nnz), checksum);
    for (size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.9f", i ? ", " : "", seconds[i]);
    std::printf("]}\n");
    std::fflush(stdout);
  }
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (argc != 4) {
    if (rank == 0) std::fprintf(stderr, "usage: combblas_spgemm MATRIX.mtx plus_times|min_plus REPEAT\n");
    MPI_Finalize();
    return 2;
  }
  int side = static_cast<int>(std::sqrt(static_cast<double>(ranks)) + 0.5);
  if (side * side != ranks) {
    if (rank == 0) std::fprintf(stderr, "CombBLAS needs a square number of ranks (got %d)\n", ranks);
    MPI_Finalize();
    return 2;
  }
  std::string semiring = argv[2];
  int repeat = std::atoi(argv[3]);
  {
    std::shared_ptr<CommGrid> grid(new CommGrid(MPI_COMM_WORLD, side, side));
    ParMatrix a(grid);
    a.ParallelReadMM(argv[1], true, maximum<double>());
    if (semiring == "plus_times") {
      run<PlusTimesSRing<double, double>>(a, repeat, rank, ranks, "plus_times");
    } else if (semiring == "min_plus") {
      run<MinPlusDouble>(a, repeat, rank, ranks, "min_plus");
    } else if (rank == 0) {
      std::fprintf(stderr, "unknown semiring %s: plus_times or min_plus\n", semiring.c_str());
    }
  }
  MPI_Finalize();
  return 0;
}
