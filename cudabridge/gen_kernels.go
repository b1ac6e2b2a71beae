package cudabridge

// The generation kernels of model.cu in Go, one loop iteration per GPU
// thread, over the same flat buffers: the batched CPU generator
// (genBatch) and the tests' fake driver run them. Each computes, element
// by element, exactly what its CUDA twin and Gen compute.

// kernelGenPool is bytenet_gen_pool.
func kernelGenPool(x []byte, off, lens, row, fresh []int32, E, pool []float32, n int) {
	for idx := range n * Embed {
		i, d := idx/Embed, idx%Embed
		pr := pool[int(row[i])*Embed:][:Embed]
		a := pr[d]
		if fresh[i] != 0 {
			a = 0
		}
		for _, c := range x[off[i]:][:lens[i]] {
			a += E[int(c)*Embed+d]
		}
		pr[d] = a
	}
}

// kernelGenMean is bytenet_gen_mean.
func kernelGenMean(pool []float32, row, plen []int32, p []float32, n int) {
	for idx := range n * Embed {
		i, d := idx/Embed, idx%Embed
		p[idx] = pool[int(row[i])*Embed+d] / float32(plen[i])
	}
}

// kernelGenFeed is bytenet_gen_feed.
func kernelGenFeed(tok, row []int32, s, E, WH, WX, BH, out []float32, base, n int) {
	for idx := range n * Hidden {
		i, j := idx/Hidden, idx%Hidden
		si := s[int(row[base+i])*Hidden:][:Hidden]
		e := E[int(tok[base+i])*Embed:][:Embed]
		wh := WH[j*Hidden:][:Hidden]
		a := BH[j]
		for k := range Hidden {
			a += float32(wh[k] * si[k])
		}
		wx := WX[j*Embed:][:Embed]
		for k := range Embed {
			a += float32(wx[k] * e[k])
		}
		out[idx] = relu(a)
	}
}

// kernelGenScatter is bytenet_gen_scatter.
func kernelGenScatter(src []float32, row []int32, dst []float32, base, n, dim int) {
	for idx := range n * dim {
		i, d := idx/dim, idx%dim
		dst[int(row[base+i])*dim+d] = src[idx]
	}
}

// kernelGenGather is bytenet_gen_gather.
func kernelGenGather(src []float32, row []int32, dst []float32, n, dim int) {
	for idx := range n * dim {
		i, d := idx/dim, idx%dim
		dst[idx] = src[int(row[i])*dim+d]
	}
}
